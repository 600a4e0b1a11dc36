// kafkajs transactions: a transactional producer commits A, aborts B and
// commits C across two partitions, and sends a group's offsets inside C
// (AddOffsetsToTxn, TxnOffsetCommit). A kafkajs consumer, which reads
// committed records only by default, then reads the topic from the start.
// Prints one JSON line: {"read": [values], "offsets": [{partition, offset}]}.
// Driven by tests/test_transactions.py.
//
// usage: node transactions.js BROKER TOPIC
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [broker, topic] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: 'floe-txn', brokers: [broker], logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });

  const producer = kafka.producer({
    transactionalId: 'kafkajs-t1', idempotent: true, maxInFlightRequests: 1,
  });
  await producer.connect();
  for (const [name, commit] of [['A', true], ['B', false], ['C', true]]) {
    const txn = await producer.transaction();
    const messages = [0, 1, 2, 3].map((i) => ({ value: `${name}-${i}`, partition: i % 2 }));
    await txn.send({ topic, messages });
    if (name === 'C') {
      await txn.sendOffsets({
        consumerGroupId: 'kafkajs-txn-group',
        topics: [{ topic, partitions: [{ partition: 0, offset: '7' }, { partition: 1, offset: '9' }] }],
      });
    }
    if (commit) await txn.commit(); else await txn.abort();
  }
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: 'kafkajs-txn-reader', maxWaitTimeInMs: 200 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const read = [];
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  await consumer.run({
    eachMessage: async ({ message }) => {
      read.push(message.value.toString());
      if (read.length >= 8) resolveDone();
    },
  });
  // Longer than a few fetches: an aborted record read late would show.
  const timer = setTimeout(() => resolveDone(), 20000);
  await done;
  await new Promise((resolve) => setTimeout(resolve, 1500));
  clearTimeout(timer);
  await consumer.disconnect();

  const offsets = await admin.fetchOffsets({ groupId: 'kafkajs-txn-group', topics: [topic] });
  await admin.disconnect();
  const partitions = offsets[0].partitions.map(({ partition, offset }) => ({ partition, offset }));
  process.stdout.write(`${JSON.stringify({ read, offsets: partitions })}\n`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
