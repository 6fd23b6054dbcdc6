package peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.HashMap;
import java.util.Map;
import org.apache.samza.application.ApplicationUtil;
import org.apache.samza.application.SamzaApplication;
import org.apache.samza.config.Config;
import org.apache.samza.config.MapConfig;
import org.apache.samza.context.Context;
import org.apache.samza.runtime.ApplicationRunner;
import org.apache.samza.runtime.ApplicationRunners;
import org.apache.samza.storage.kv.KeyValueStore;
import org.apache.samza.system.IncomingMessageEnvelope;
import org.apache.samza.system.OutgoingMessageEnvelope;
import org.apache.samza.system.SystemStream;
import org.apache.samza.task.InitableTask;
import org.apache.samza.task.MessageCollector;
import org.apache.samza.task.StreamTask;
import org.apache.samza.task.TaskCoordinator;

/**
 * The peer benchmark's keyed count as an Apache Samza 1.8 low-level StreamTask: a RocksDB store (changelogged to
 * Kafka) of the count per JSON "key", each running count sent as JSON. Run standalone in this JVM
 * (LocalApplicationRunner with the passthrough job coordinator: one processor owns every partition).
 * Samza's Kafka output is at least once.
 *
 * <p>Arguments are key=value pairs: bootstrap, input, output, job, state, commit_ms ("default": Samza's 60 s).
 */
public final class SamzaCount {
    private SamzaCount() {}

    /** One Samza task per input partition (GroupByPartition); the input is partitioned by the key already. */
    public static final class CountTask implements StreamTask, InitableTask {
        private final ObjectMapper json = new ObjectMapper();
        private KeyValueStore<String, Long> store;
        private SystemStream output;

        @Override
        @SuppressWarnings("unchecked")
        public void init(Context context) {
            store = (KeyValueStore<String, Long>) context.getTaskContext().getStore("counts");
            output = new SystemStream("kafka", context.getJobContext().getConfig().get("peers.output"));
        }

        @Override
        public void process(IncomingMessageEnvelope envelope, MessageCollector collector, TaskCoordinator coordinator)
                throws Exception {
            JsonNode message = json.readTree((String) envelope.getMessage());
            String key = message.get("key").asText();
            Long previous = store.get(key);
            long count = previous == null ? 1L : previous + 1L;
            store.put(key, count);
            ObjectNode out = json.createObjectNode();
            out.put("key", key);
            out.put("count", count);
            collector.send(new OutgoingMessageEnvelope(output, key, json.writeValueAsString(out)));
        }
    }

    public static void main(String[] args) {
        Map<String, String> a = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            a.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        String job = a.get("job");
        Map<String, String> c = new HashMap<>();
        c.put("job.name", job);
        c.put("job.id", "1");
        c.put("processor.id", "0");
        c.put("app.runner.class", "org.apache.samza.runtime.LocalApplicationRunner");
        c.put("job.coordinator.factory", "org.apache.samza.standalone.PassthroughJobCoordinatorFactory");
        c.put("task.name.grouper.factory", "org.apache.samza.container.grouper.task.SingleContainerGrouperFactory");
        c.put("task.class", CountTask.class.getName());
        c.put("task.inputs", "kafka." + a.get("input"));
        c.put("peers.output", a.get("output"));
        c.put("task.checkpoint.factory", "org.apache.samza.checkpoint.kafka.KafkaCheckpointManagerFactory");
        c.put("task.checkpoint.system", "kafka");
        c.put("task.checkpoint.replication.factor", "1");
        String commit = a.getOrDefault("commit_ms", "default");
        if (!commit.equals("default")) {
            c.put("task.commit.ms", commit);
        }
        c.put("systems.kafka.samza.factory", "org.apache.samza.system.kafka.KafkaSystemFactory");
        c.put("systems.kafka.consumer.bootstrap.servers", a.get("bootstrap"));
        c.put("systems.kafka.producer.bootstrap.servers", a.get("bootstrap"));
        c.put("systems.kafka.samza.offset.default", "oldest");
        c.put("systems.kafka.default.stream.replication.factor", "1");
        c.put("systems.kafka.samza.key.serde", "string");
        c.put("systems.kafka.samza.msg.serde", "string");
        c.put("serializers.registry.string.class", "org.apache.samza.serializers.StringSerdeFactory");
        c.put("serializers.registry.long.class", "org.apache.samza.serializers.LongSerdeFactory");
        c.put("stores.counts.factory", "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory");
        c.put("stores.counts.key.serde", "string");
        c.put("stores.counts.msg.serde", "long");
        c.put("stores.counts.changelog", "kafka." + job + "-counts-changelog");
        c.put("stores.counts.changelog.replication.factor", "1");
        c.put("job.logged.store.base.dir", a.get("state"));
        c.put("job.non-logged.store.base.dir", a.get("state"));
        Config config = new MapConfig(c);
        SamzaApplication<?> app = ApplicationUtil.fromConfig(config);
        ApplicationRunner runner = ApplicationRunners.getApplicationRunner(app, config);
        Runtime.getRuntime().addShutdownHook(new Thread(runner::kill));
        runner.run(null);
        System.out.println("samza started");
        runner.waitForFinish();
    }
}
