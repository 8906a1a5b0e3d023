'use strict';
// The wire contract for the Node.js servers.
//
// servers/contract.py is the source: every value here is a copy of a name there (and of the
// few neutral constants in servers/core/sinks.py and servers/core/memcache.py), under the
// same name in camelCase. Change it there first, then
// here; tests/test_contract.py checks the behaviour, not this file.

module.exports = Object.freeze({
  // -- routes (contract.py) -----------------------------------------------------------
  ROUTE_TEXT: '/',
  ROUTE_COUNTER: '/counter',
  ROUTE_LOG: '/log',
  ROUTE_FILES_PREFIX: '/files/',
  ROUTE_GRIDFS_PREFIX: '/gridfs/',
  ROUTE_MEMCACHED_PREFIX: '/mc/',
  ROUTE_WEBSOCKET: '/ws',
  ROUTE_JSON: '/json',
  ROUTE_PLAINTEXT: '/plaintext',
  ROUTE_DELAY_PREFIX: '/delay/',
  ROUTE_UPLOAD: '/upload',
  ROUTE_JSON_COMP: '/json-comp',
  ROUTE_BODY_10K: '/body/10k',
  WORKLOAD_ROUTES: Object.freeze(['/json', '/plaintext', '/delay/', '/upload', '/json-comp', '/body/10k']),
  // the workloads' payloads come in this environment variable (contract.workload_values)
  WORKLOADS_ENV: 'SERVERBENCH_WORKLOADS',

  // -- payloads -------------------------------------------------------------------------
  TEXT_BODY: Buffer.from('I am a stupid HTTP server!'),
  TEXT_CONTENT_TYPE: 'text/plain',
  JSON_CONTENT_TYPE: 'application/json',
  LOG_REPLY_BODY: Buffer.from('success'),
  LOG_MAX_BODY_BYTES: 1024 * 1024,
  WEBSOCKET_RECORD_METHOD: 'WS',

  // -- static files, GridFS and memcached -------------------------------------------------
  FILE_NAME_PATTERN: /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/, // contract.FILE_NAME_PATTERN, anchored
  FILE_CONTENT_TYPES: Object.freeze({
    '.jpg': 'image/jpeg',
    '.png': 'image/png',
    '.gif': 'image/gif',
    '.txt': 'text/plain',
  }),
  DEFAULT_CONTENT_TYPE: 'application/octet-stream',
  GRIDFS_DATABASE: 'harness', // the default --mongo-db
  MONGO_DB_PATTERN: /^[A-Za-z0-9_-]{1,63}$/, // contract.MONGO_DB_PATTERN, anchored
  GRIDFS_BUCKET: 'fs',
  MC_POOL_SIZE: 50,
  MC_MAX_KEY_BYTES: 250,
  MC_CONTENT_TYPE: 'application/octet-stream',
  MC_TIMEOUT_MS: 2000, // contract.MC_TIMEOUT_S
  MC_SOCKET_MAX_IN_FLIGHT: 1, // mc_socket_service.js keeps one get in flight per connection
  NOT_FOUND_BODY: Buffer.from('not found'),
  UNAVAILABLE_STATUS: 503,
  BACKEND_UNAVAILABLE_BODY: Buffer.from('backend unavailable'),
  SINK_UNAVAILABLE_BODY: Buffer.from('sink unavailable'),

  // -- WebSocket rules --------------------------------------------------------------------
  WS_SUBPROTOCOL: 'myprotocol',
  WS_ORIGIN: 'agent',
  WS_BAD_ORIGIN_STATUS: 403,
  WS_NO_SUBPROTOCOL_STATUS: 400,
  WS_MAX_MESSAGE_BYTES: 1024 * 1024,
  WS_CLOSE_NORMAL: 1000,
  WS_CLOSE_GOING_AWAY: 1001,
  WS_CLOSE_PROTOCOL_ERROR: 1002,
  WS_CLOSE_UNSUPPORTED_DATA: 1003,
  WS_CLOSE_INVALID_PAYLOAD: 1007,
  WS_CLOSE_TOO_BIG: 1009,
  WS_CLOSE_TRY_AGAIN_LATER: 1013,
  WS_SINK_MAX_PENDING: 1024,
  MONGO_BATCH_MAX_RECORDS: 100, // the mongo sink's group commit: records per insertMany
  MONGO_BATCH_LIMIT: 100000,

  // -- process model and timing -------------------------------------------------------------
  TICK_INTERVAL_MS: 10, // contract.TICK_INTERVAL_S
  TELEMETRY_INTERVAL_MS: 1000, // contract.TELEMETRY_INTERVAL_S
  SHUTDOWN_GRACE_MS: 5000, // contract.SHUTDOWN_GRACE_S
  HEAD_TIMEOUT_MS: 10_000, // contract.HEAD_TIMEOUT_S
  BODY_TIMEOUT_MS: 30_000, // contract.BODY_TIMEOUT_S
  LISTEN_BACKLOG: 65535,
  SINKS: Object.freeze(['empty', 'file', 'mongo']),
  MONGO_URL_ENV: 'SERVERBENCH_MONGO_URL', // the URL when --mongo-url is not given

  // -- sinks (servers/core/sinks.py) ---------------------------------------------------------------
  FLUSH_INTERVAL_MS: 100, // sinks.FLUSH_INTERVAL_S
  MONGO_DATABASE: 'harness',
  MONGO_COLLECTION: 'records',
  MONGO_SERVER_SELECTION_TIMEOUT_MS: 2000,
  MONGO_WRITE_TIMEOUT_MS: 10_000, // sinks.MONGO_WRITE_TIMEOUT_MS: a batch unsettled this long fails
  DEFAULT_MONGO_URL: 'mongodb://127.0.0.1:27017/',

  // -- the memcached text protocol (servers/core/memcache.py) ------------------------------------
  MC_MAX_LINE_BYTES: 2048, // memcache.MAX_LINE_BYTES
  MC_DEFAULT_ADDRESS: '127.0.0.1:11211',
  MC_REPLY_END: Buffer.from('END\r\n'),
  MC_REPLY_ERROR: Buffer.from('ERROR\r\n'),
  MC_REPLY_LINE_TOO_LONG: Buffer.from('CLIENT_ERROR line too long\r\n'),
  MC_REPLY_BAD_KEY: Buffer.from('CLIENT_ERROR bad key\r\n'),
  MC_REPLY_UNAVAILABLE: Buffer.from('SERVER_ERROR memcached unavailable\r\n'),

  // -- protocols (docs/contract.md, "Protocols") ---------------------------------------------
  PROTOCOL_H1: 'h1',
  PROTOCOL_H1_TLS: 'h1-tls',
  PROTOCOL_H2: 'h2',
  PROTOCOL_H2C: 'h2c',
  PROTOCOLS: Object.freeze(['h1', 'h1-tls', 'h2', 'h2c']),
  TLS_PROTOCOLS: Object.freeze(['h1-tls', 'h2']),
  ALPN_FOR_PROTOCOL: Object.freeze({ 'h1-tls': 'http/1.1', h2: 'h2' }),
  TLS_MINIMUM_VERSION: 'TLSv1.3',
  TLS_SERVER_NAMES: Object.freeze(['localhost', '127.0.0.1', '::1']),

  // -- telemetry line: contract.TELEMETRY_FIELDS, in order --------------------------------
  TELEMETRY_FIELDS: Object.freeze([
    't',
    'pid',
    'open',
    'max_open',
    'requests',
    'messages',
    'bad',
    'tick_avg_ms',
    'tick_max_ms',
    'gc_collections',
    'gc_pause_ms',
    'stored',
    'sink_errors',
    'backlog',
    'rss_bytes',
    'framework',
    'loop',
    'port',
    'worker',
    'mc_port',
    'backend_errors',
  ]),
});
