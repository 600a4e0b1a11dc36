// Produces COUNT records to TOPIC with kafkajs using CODEC, then reads the
// partition offsets back through the admin client (ListOffsets), and prints
// one JSON line with what it saw. Driven by tests/test_kafkajs.py.
//
// usage: node produce.js BROKER TOPIC PARTITIONS COUNT CODEC
const { Kafka, logLevel } = require('kafkajs');
const { ready, CODECS } = require('./codecs');

async function main() {
  const [broker, topic, partitionsArg, countArg, codecName] = process.argv.slice(2);
  const partitions = Number(partitionsArg);
  const count = Number(countArg);
  await ready;
  const kafka = new Kafka({ clientId: 'floe-test', brokers: [broker], logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const started = Date.now();
  const acked = []; // [partition, baseOffset, count] per acknowledged batch
  // Each send waits for one flush of the agent (250 ms by default), so send big requests.
  const perRequest = 10000;
  for (let start = 0; start < count; start += perRequest) {
    const messages = [];
    for (let i = start; i < Math.min(count, start + perRequest); i++) {
      messages.push({ key: `k${i}`, value: `${codecName}-${i}`, partition: i % partitions });
    }
    const result = await producer.send({ topic, messages, compression: CODECS[codecName], acks: -1 });
    for (const r of result) {
      if (r.errorCode !== 0) throw new Error(`produce error ${r.errorCode}`);
      const inPartition = messages.filter((m) => m.partition === r.partition).length;
      acked.push([r.partition, Number(r.baseOffset), inPartition]);
    }
  }
  const offsets = await admin.fetchTopicOffsets(topic);
  const byTime = await admin.fetchTopicOffsetsByTimestamp(topic, started - 1000);
  await producer.disconnect();
  await admin.disconnect();
  console.log(JSON.stringify({ acked, offsets, byTime }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
