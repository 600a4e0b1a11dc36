// Consumes COUNT records of TOPIC in consumer group GROUP with kafkajs (which
// has no consumer outside groups: FindCoordinator, JoinGroup, SyncGroup,
// Heartbeat, OffsetFetch/OffsetCommit, LeaveGroup), and prints one line per
// record: "partition offset value". Driven by tests/test_kafkajs.py.
//
// usage: node consume.js BROKER TOPIC GROUP COUNT
const { Kafka, logLevel } = require('kafkajs');
const { ready } = require('./codecs');

async function main() {
  const [broker, topic, groupId, countArg] = process.argv.slice(2);
  const count = Number(countArg);
  await ready;
  const kafka = new Kafka({ clientId: 'floe-test', brokers: [broker], logLevel: logLevel.ERROR });
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const lines = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  await consumer.run({
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      for (const m of batch.messages) {
        lines.push(`${batch.partition} ${m.offset} ${m.value.toString()}`);
        resolveOffset(m.offset);
      }
      await heartbeat();
      if (lines.length >= count) resolveDone();
    },
  });
  const timer = setTimeout(() => resolveDone(), 120000);
  await done;
  clearTimeout(timer);
  await consumer.disconnect(); // commits offsets and leaves the group
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
