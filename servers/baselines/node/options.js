'use strict';
// The command line: `server.js VARIANT --host H --port P --sink S ...`.
//
// `python -m servers VARIANT ...` has validated these arguments already (argparse and
// contract.ServerOptions) before it execs node with the same argv, so this parser only
// converts them; a value it cannot read still ends the process with one line.

const contract = require('./contract');
const { VARIANT_PROTOCOLS } = require('./protocols');

const VARIANTS = Object.freeze(['node-http', 'node-express']);

const FLAGS = Object.freeze({
  '--host': 'host',
  '--port': 'port',
  '--sink': 'sink',
  '--sink-path': 'sinkPath',
  '--mongo-url': 'mongoUrl',
  '--mongo-w': 'mongoW',
  '--mongo-db': 'mongoDb',
  '--mongo-batch': 'mongoBatch',
  '--files-dir': 'filesDir',
  '--memcached': 'memcached',
  '--mc-socket-port': 'mcSocketPort',
  '--workers': 'workers',
  '--loop': 'loop',
  '--client-timeout-s': 'clientTimeoutS',
  '--write-timeout-s': 'writeTimeoutS',
  '--protocol': 'protocol',
  '--tls-cert': 'tlsCert',
  '--tls-key': 'tlsKey',
});
const INTEGER_OPTIONS = new Set(['port', 'mongoW', 'mongoBatch', 'mcSocketPort', 'workers']);
const NUMBER_OPTIONS = new Set(['clientTimeoutS', 'writeTimeoutS']);
const MAX_CLIENT_TIMEOUT_S = 3600; // contract.ServerOptions' bound
const MAX_WRITE_TIMEOUT_S = contract.MONGO_WRITE_TIMEOUT_MS / 1000; // it only shortens it

class UsageError extends Error {}

/**
 * The options in `argv` (process.argv without node and the script); `mongoUrl` is
 * `--mongo-url`, else the environment's contract.MONGO_URL_ENV. `headTimeoutMs` and
 * `bodyTimeoutMs` are the slow-client deadlines: both `--client-timeout-s` when it is given,
 * else contract.HEAD_TIMEOUT_MS and contract.BODY_TIMEOUT_MS. `writeTimeoutMs` is the mongo
 * sink's write deadline: `--write-timeout-s` when it is given, else
 * contract.MONGO_WRITE_TIMEOUT_MS.
 * @returns {{variant: string, host: string, port: number, sink: string, sinkPath: ?string,
 *   mongoUrl: ?string, mongoW: number, mongoDb: string, mongoBatch: number,
 *   filesDir: ?string, memcached: ?string, mcSocketPort: ?number, workers: number,
 *   loop: string, durable: boolean, clientTimeoutS: ?number, headTimeoutMs: number,
 *   bodyTimeoutMs: number, writeTimeoutS: ?number, writeTimeoutMs: number, protocol: string,
 *   tlsCert: ?string, tlsKey: ?string}}
 */
function parseOptions(argv) {
  const [variant, ...rest] = argv;
  if (!VARIANTS.includes(variant)) {
    throw new UsageError(`the first argument must be one of ${VARIANTS.join(', ')}, not ${variant}`);
  }
  const options = {
    variant,
    host: '127.0.0.1',
    port: 0,
    sink: 'empty',
    sinkPath: null,
    mongoUrl: null,
    mongoW: 1,
    mongoDb: contract.GRIDFS_DATABASE,
    mongoBatch: contract.MONGO_BATCH_MAX_RECORDS,
    filesDir: null,
    memcached: null,
    mcSocketPort: null,
    workers: 1,
    loop: 'libuv',
    durable: false,
    clientTimeoutS: null,
    headTimeoutMs: contract.HEAD_TIMEOUT_MS,
    bodyTimeoutMs: contract.BODY_TIMEOUT_MS,
    writeTimeoutS: null,
    writeTimeoutMs: contract.MONGO_WRITE_TIMEOUT_MS,
    protocol: contract.PROTOCOL_H1,
    tlsCert: null, // PEM certificate chain (contract.TLS_PROTOCOLS only)
    tlsKey: null,
  };
  for (let i = 0; i < rest.length; i += 1) {
    let flag = rest[i];
    if (flag === '--durable') {
      options.durable = true; // a switch: no value
      continue;
    }
    let value;
    const equals = flag.indexOf('=');
    if (equals > 0) {
      value = flag.slice(equals + 1);
      flag = flag.slice(0, equals);
    } else {
      value = rest[(i += 1)];
    }
    const name = FLAGS[flag];
    if (name === undefined) throw new UsageError(`unknown argument ${flag}`);
    if (value === undefined) throw new UsageError(`${flag} needs a value`);
    if (INTEGER_OPTIONS.has(name)) {
      if (!/^\d+$/.test(value)) throw new UsageError(`${flag} must be an integer, not ${value}`);
      options[name] = Number(value);
    } else if (NUMBER_OPTIONS.has(name)) {
      const number = Number(value);
      if (value.trim() === '' || !Number.isFinite(number)) {
        throw new UsageError(`${flag} must be a number, not ${value}`);
      }
      options[name] = number;
    } else {
      options[name] = value;
    }
  }
  // the harness gives the URL in the environment: a command line is shown to every user (ps)
  if (options.mongoUrl === null && process.env[contract.MONGO_URL_ENV]) {
    options.mongoUrl = process.env[contract.MONGO_URL_ENV];
  }
  if (!contract.SINKS.includes(options.sink)) {
    throw new UsageError(`sink ${options.sink} is not one of ${contract.SINKS.join(', ')}`);
  }
  if (options.sink === 'file' && !options.sinkPath) {
    throw new UsageError('--sink file needs --sink-path FILE');
  }
  if (options.port > 65535) throw new UsageError(`port ${options.port} is outside 0..65535`);
  if (options.workers < 1) throw new UsageError(`workers must be at least 1, not ${options.workers}`);
  if (options.mongoW > 1) throw new UsageError(`mongo-w must be 0 or 1, not ${options.mongoW}`);
  if (options.mongoBatch < 1 || options.mongoBatch > contract.MONGO_BATCH_LIMIT) {
    throw new UsageError(
      `mongo-batch must be in 1..${contract.MONGO_BATCH_LIMIT}, not ${options.mongoBatch}`,
    );
  }
  if (!contract.MONGO_DB_PATTERN.test(options.mongoDb)) {
    throw new UsageError(`mongo-db ${options.mongoDb} does not match ${contract.MONGO_DB_PATTERN}`);
  }
  if (options.clientTimeoutS !== null) {
    if (!(options.clientTimeoutS > 0 && options.clientTimeoutS <= MAX_CLIENT_TIMEOUT_S)) {
      throw new UsageError(
        `client-timeout-s must be in (0, ${MAX_CLIENT_TIMEOUT_S}], not ${options.clientTimeoutS}`,
      );
    }
    options.headTimeoutMs = options.clientTimeoutS * 1000;
    options.bodyTimeoutMs = options.clientTimeoutS * 1000;
  }
  if (options.writeTimeoutS !== null) {
    if (!(options.writeTimeoutS > 0 && options.writeTimeoutS <= MAX_WRITE_TIMEOUT_S)) {
      throw new UsageError(
        `write-timeout-s must be in (0, ${MAX_WRITE_TIMEOUT_S}], not ${options.writeTimeoutS}`,
      );
    }
    options.writeTimeoutMs = options.writeTimeoutS * 1000;
  }
  if (!contract.PROTOCOLS.includes(options.protocol)) {
    throw new UsageError(`protocol ${options.protocol} is not one of ${contract.PROTOCOLS.join(', ')}`);
  }
  const spoken = VARIANT_PROTOCOLS[variant];
  if (!spoken.includes(options.protocol)) {
    throw new UsageError(`${variant} speaks ${spoken.join(', ')}, not ${options.protocol}`);
  }
  const tls = contract.TLS_PROTOCOLS.includes(options.protocol);
  if (tls && !(options.tlsCert && options.tlsKey)) {
    throw new UsageError(`protocol ${options.protocol} needs --tls-cert and --tls-key`);
  }
  if (!tls && (options.tlsCert || options.tlsKey)) {
    throw new UsageError(`protocol ${options.protocol} is cleartext: no --tls-cert/--tls-key`);
  }
  if (options.loop !== 'libuv') throw new UsageError(`${variant} runs on libuv, not ${options.loop}`);
  return options;
}

module.exports = { parseOptions, UsageError, VARIANTS };
