"""Seeded generator of the demo's data: Wikipedia-edit-like events and a user-profile CDC stream.

The data is synthetic. Pages and users follow Zipf distributions (a few hot pages and prolific
users, a long tail), edit times spread over a few hours with small out-of-order jitter, and byte
deltas are mostly small with occasional large edits. The profile stream inserts every user,
then updates some and deletes a few, as a change-capture feed of a users table would.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Edit", "expected_demo_windows", "expected_user_sessions", "expected_windows", "final_profiles",
           "generate_edits", "generate_profiles", "profiles_for_users", "read_edits_jsonl", "write_jsonl"]

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
COUNTRIES = ["DE", "FR", "US", "IN", "BR", "JP", "NG", "PL", "ES", "SE"]


@dataclass(frozen=True)
class Edit:
    """One edit event."""

    page: str
    user: str
    bytes_changed: int
    timestamp: int

    def to_json(self) -> dict[str, object]:
        """The JSON object written to the stream."""
        return {"page": self.page, "user": self.user, "bytes_changed": self.bytes_changed,
                "timestamp": self.timestamp}


def _zipf_sampler(rng: random.Random, n: int, s: float) -> list[float]:
    weights = [1.0 / (rank ** s) for rank in range(1, n + 1)]
    total = sum(weights)
    acc, cum = 0.0, []
    for w in weights:
        acc += w / total
        cum.append(acc)
    return cum


def _draw(rng: random.Random, cum: list[float]) -> int:
    import bisect

    return min(bisect.bisect_left(cum, rng.random()), len(cum) - 1)


def generate_edits(count: int, *, seed: int = 7, pages: int = 500, users: int = 200,
                   hours: float = 3.0) -> list[Edit]:
    """``count`` edits over ``hours`` hours from ``START_MS``; the same seed gives the same list."""
    rng = random.Random(seed)
    page_cum = _zipf_sampler(rng, pages, 1.1)
    user_cum = _zipf_sampler(rng, users, 1.2)
    span = int(hours * 3_600_000)
    edits = []
    for i in range(count):
        base = START_MS + (span * i) // max(count, 1)
        jitter = int(rng.gauss(0, 5_000))  # a few seconds out of order, as real feeds are
        size = int(rng.gauss(0, 120)) if rng.random() < 0.9 else int(rng.gauss(0, 4_000))
        edits.append(Edit(f"Page_{_draw(rng, page_cum):04d}", f"user{_draw(rng, user_cum):04d}", size,
                          max(START_MS, base + jitter)))
    return edits


def generate_profiles(users: int = 200, *, seed: int = 11) -> list[tuple[str, dict[str, object] | None]]:
    """CDC rows ``(user, profile or None for delete)``: inserts, then ~20% updates and ~3% deletes."""
    return profiles_for_users([f"user{u:04d}" for u in range(users)], seed=seed)


def profiles_for_users(names: list[str], *, seed: int = 11) -> list[tuple[str, dict[str, object] | None]]:
    """CDC rows for the users ``names`` (real input brings its own user names): every user inserted,
    then ~20% updated (new country, registration year and bot flag) and ~3% (at least one) deleted."""
    rng = random.Random(seed)
    rows: list[tuple[str, dict[str, object] | None]] = []

    def profile(name: str) -> dict[str, object]:
        return {"user": name, "country": rng.choice(COUNTRIES), "registered": 2010 + rng.randrange(16),
                "bot": rng.random() < 0.05}

    for name in names:
        rows.append((name, profile(name)))
    for i in rng.sample(range(len(names)), len(names) // 5):
        rows.append((names[i], profile(names[i])))
    for i in rng.sample(range(len(names)), min(len(names), max(1, len(names) // 33))):
        rows.append((names[i], None))
    return rows


def final_profiles(rows: list[tuple[str, dict[str, object] | None]]) -> dict[str, dict[str, object]]:
    """The table the CDC rows describe after all of them are applied."""
    table: dict[str, dict[str, object]] = {}
    for user, profile in rows:
        if profile is None:
            table.pop(user, None)
        else:
            table[user] = profile
    return table


def expected_windows(edits: list[Edit], window_ms: int = 60_000) -> dict[tuple[str, int], tuple[int, int]]:
    """``(page, window start) -> (edits, sum of bytes changed)``: what the demo pipeline must output."""
    out: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for e in edits:
        acc = out[(e.page, e.timestamp - e.timestamp % window_ms)]
        acc[0] += 1
        acc[1] += e.bytes_changed
    return {k: (v[0], v[1]) for k, v in out.items()}


def expected_demo_windows(edits: list[Edit], profile_rows: list[tuple[str, dict[str, object] | None]],
                          window_ms: int = 60_000) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``(page, window start) -> (edits, bytes changed, edits by bots)`` as the demo must output them:
    the inner join keeps only edits whose user has a profile once every CDC row is applied (the store
    is bootstrapped before the first edit), and the bot flag comes from that final profile."""
    table = final_profiles(profile_rows)
    kept = [e for e in edits if e.user in table]
    bots = {user for user, p in table.items() if p.get("bot")}
    out: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in kept:
        acc = out[(e.page, e.timestamp - e.timestamp % window_ms)]
        acc[0] += 1
        acc[1] += e.bytes_changed
        acc[2] += 1 if e.user in bots else 0
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def expected_user_sessions(edits: list[Edit], gap_ms: int = 30 * 60_000) -> dict[tuple[str, int],
                                                                               tuple[int, int, int]]:
    """``(user, session start) -> (session end, edits, bytes changed)``: a user's edits in event-time order,
    a new session whenever the next edit is ``gap_ms`` or more after the previous one; a session ends
    ``gap_ms`` after its last edit. Every edit counts (the sessions come before the profile join)."""
    by_user: dict[str, list[Edit]] = defaultdict(list)
    for e in edits:
        by_user[e.user].append(e)
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    for user, items in by_user.items():
        items.sort(key=lambda e: e.timestamp)
        group = [items[0]]
        for nxt in [*items[1:], None]:
            if nxt is not None and nxt.timestamp - group[-1].timestamp < gap_ms:
                group.append(nxt)
                continue
            out[(user, group[0].timestamp)] = (group[-1].timestamp + gap_ms, len(group),
                                               sum(x.bytes_changed for x in group))
            if nxt is not None:
                group = [nxt]
    return out


def write_jsonl(path: Path, objects: list[dict[str, object]]) -> None:
    """Write objects as JSON lines."""
    with open(path, "w", encoding="utf-8") as fh:
        for obj in objects:
            fh.write(json.dumps(obj, separators=(",", ":")) + "\n")


def read_edits_jsonl(path: Path) -> Iterator[Edit]:
    """Real input: JSON lines with page, user, bytes_changed and timestamp (epoch ms) fields."""
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                yield Edit(str(obj["page"]), str(obj["user"]), int(obj["bytes_changed"]), int(obj["timestamp"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not an edit (need page, user, bytes_changed, timestamp): {exc}") \
                    from exc
