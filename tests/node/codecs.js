// kafkajs ships gzip only; this registers pure-JS/wasm codecs for snappy, lz4
// and zstd. `await ready` before producing or consuming: zstd's wasm module
// must be instantiated once, before any concurrent use.
const { CompressionTypes, CompressionCodecs } = require('kafkajs');
const SnappyCodec = require('kafkajs-snappy');
const lz4 = require('lz4js');
const zstd = require('@bokuweb/zstd-wasm');

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;
CompressionCodecs[CompressionTypes.LZ4] = () => ({
  async compress(encoder) { return Buffer.from(lz4.compress(encoder.buffer)); },
  async decompress(buffer) { return Buffer.from(lz4.decompress(buffer)); },
});
CompressionCodecs[CompressionTypes.ZSTD] = () => ({
  async compress(encoder) { return Buffer.from(zstd.compress(encoder.buffer, 3)); },
  async decompress(buffer) { return Buffer.from(zstd.decompress(buffer)); },
});

module.exports = {
  ready: zstd.init(),
  CODECS: {
    none: CompressionTypes.None,
    gzip: CompressionTypes.GZIP,
    snappy: CompressionTypes.Snappy,
    lz4: CompressionTypes.LZ4,
    zstd: CompressionTypes.ZSTD,
  },
};
