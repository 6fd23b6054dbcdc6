"""``python -m sparza.cli``: the same as the ``sparza`` command."""

from sparza.cli import main

main()
