package peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The peer benchmark's keyed count in Kafka Streams: read JSON messages, count per JSON "key" in a RocksDB
 * store (changelogged), write each running count as JSON. Exactly once (exactly_once_v2) unless told otherwise.
 *
 * <p>Arguments are key=value pairs: bootstrap, input, output, app (application.id), state (state dir),
 * commit_ms ("default" keeps Kafka Streams' own), guarantee (exactly_once_v2 | at_least_once).
 */
public final class KStreamsCount {
    private static final String STORE = "counts";

    private KStreamsCount() {}

    /** The per-record processor: the input is already partitioned by the key, so no repartition topic. */
    static final class CountProcessor implements Processor<byte[], byte[], String, String> {
        private final ObjectMapper json = new ObjectMapper();
        private ProcessorContext<String, String> context;
        private KeyValueStore<String, Long> store;

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            this.store = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<byte[], byte[]> record) {
            try {
                JsonNode message = json.readTree(record.value());
                String key = message.get("key").asText();
                Long previous = store.get(key);
                long count = previous == null ? 1L : previous + 1L;
                store.put(key, count);
                ObjectNode out = json.createObjectNode();
                out.put("key", key);
                out.put("count", count);
                context.forward(record.withKey(key).withValue(json.writeValueAsString(out)));
            } catch (java.io.IOException e) {
                throw new IllegalArgumentException("not a JSON message: "
                        + new String(record.value(), StandardCharsets.UTF_8), e);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            a.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("app"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, a.getOrDefault("guarantee", "exactly_once_v2"));
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        String commit = a.getOrDefault("commit_ms", "default");
        if (!commit.equals("default")) {
            props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(commit));
        }
        Topology topology = new Topology();
        topology.addSource("in", Serdes.ByteArray().deserializer(), Serdes.ByteArray().deserializer(), a.get("input"));
        topology.addProcessor("count", CountProcessor::new, "in");
        topology.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE),
                Serdes.String(), Serdes.Long()), "count");
        topology.addSink("out", a.get("output"), Serdes.String().serializer(), Serdes.String().serializer(), "count");
        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stopped.countDown();
        }));
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .SHUTDOWN_CLIENT;
        });
        streams.start();
        System.out.println("kstreams started");
        stopped.await();
    }
}
