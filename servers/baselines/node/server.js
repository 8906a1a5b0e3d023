'use strict';
// `node server.js node-http|node-express --host H --port P --sink S ...`: a Node.js baseline
// behind the wire contract (servers/contract.py). `python -m servers VARIANT ...` validates
// the arguments and execs this with the same argv.
//
// One process per worker. With `--workers N` this process is the cluster primary: it forks
// N workers, forwards SIGTERM/SIGINT to them and exits 0 when all exit 0. Node 20 cannot set
// SO_REUSEPORT, so the workers share one listening socket through the cluster module
// (round-robin: the primary accepts and hands connections out); `--port 0` gives every
// worker the same OS-chosen port. Each worker prints its own telemetry line.
//
// `--protocol` picks the listener (protocols.js): http, https (h1-tls), or http2 over TLS
// (h2) or cleartext (h2c); every route, sink and backend is the same over each. /ws is
// served over h1 and h1-tls (wss), where the server has HTTP/1.1 upgrades.

const cluster = require('node:cluster');

const contract = require('./contract');
const { ClientDeadlines } = require('./deadlines');
const { makeHandlers } = require('./handlers');
const { MemcachedSocketService } = require('./mc_socket_service');
const { MemcachedPool } = require('./memcache');
const { LazyMongo } = require('./mongo');
const { GridFS } = require('./gridfs');
const { parseOptions, UsageError } = require('./options');
const { createServer, isHttp2 } = require('./protocols');
const { openSink } = require('./sinks');
const { ServerState } = require('./state');
const { StaticFiles } = require('./static');
const { WebSockets } = require('./websocket');

// Shutdown: connections still busy this long after SIGTERM are closed; the process exits
// well inside contract.SHUTDOWN_GRACE_MS even when something hangs.
const FORCE_CLOSE_AFTER_MS = 2000;
const GIVE_UP_AFTER_MS = contract.SHUTDOWN_GRACE_MS - 500;
const IDLE_SWEEP_MS = 50;
const MONGO_CLOSE_TIMEOUT_MS = 1000;

function serverHeader(variant) {
  const node = `Node.js/${process.versions.node}`;
  if (variant !== 'node-express') return node;
  return `${node} express/${require('express/package.json').version}`;
}

function listen(server, host, port) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port, backlog: contract.LISTEN_BACKLOG }, () => {
      server.off('error', reject);
      resolve(server.address().port);
    });
  });
}

/** Serve until SIGTERM/SIGINT (or the primary going away); then close, drain and exit 0. */
async function runWorker(options, worker) {
  const state = new ServerState(options.variant, worker);
  const mongo = new LazyMongo(options.mongoUrl, options.mongoDb);
  const pool = new MemcachedPool(options.memcached, state);
  const backends = {
    state,
    sink: openSink(options, state, mongo),
    files: new StaticFiles(options.filesDir),
    gridfs: new GridFS(mongo, state),
    pool,
    serverHeader: serverHeader(options.variant),
  };
  const handlers = makeHandlers(backends);
  const routes =
    options.variant === 'node-express'
      ? require('./routes_express').makeApp(handlers)
      : require('./routes_http').makeRequestListener(handlers);
  const http2 = isHttp2(options.protocol);
  // HTTP/1.1's slow-client deadlines, per connection; an HTTP/2 session has Node's idle
  // timeout instead (protocols.js), its streams being no connection's next head.
  const deadlines = http2 ? null : new ClientDeadlines(options.headTimeoutMs, options.bodyTimeoutMs);
  // llhttp refuses most ambiguous framing itself, but Node 20 serves a GET with
  // `Transfer-Encoding: xchunked` and then what follows as a second request: refuse it
  // (docs/contract.md, "Hostile input"). HTTP/2 has no Transfer-Encoding (nghttp2 resets
  // a stream that sends one).
  const listener = (req, res) => {
    if (deadlines !== null) deadlines.headArrived(req, res);
    const transferEncoding = req.headers['transfer-encoding'];
    if (transferEncoding !== undefined && transferEncoding.toLowerCase() !== 'chunked') {
      handlers.badFraming(req, res);
      return;
    }
    routes(req, res);
  };

  let server;
  try {
    server = createServer(
      options,
      {
        noDelay: true,
        requireHostHeader: false, // HTTP/1.1 without Host is served, as in Python
        // The slow-client deadlines are ClientDeadlines' (deadlines.js says why): Node's own
        // header and request limits are off, so a long --client-timeout-s is not cut short.
        headersTimeout: 0,
        requestTimeout: 0,
        // What Keep-Alive: timeout= advertises; Node's idle timer behind it fires a second
        // after the head deadline, which deadlines.js's sweep notices within half a second.
        keepAliveTimeout: Math.ceil(options.headTimeoutMs),
      },
      listener,
    );
  } catch (error) {
    process.stderr.write(`servers: ${error.message}\n`);
    process.exit(1);
  }
  // 'connection' is the TCP socket under every protocol: `open` counts TCP connections,
  // a TLS one from its accept, before its handshake.
  server.on('connection', (socket) => {
    socket.setNoDelay(true); // every socket: no 40 ms delayed-ACK stalls (docs/contract.md)
    state.connectionOpened();
    socket.once('close', () => state.connectionClosed());
  });
  // The deadlines watch the socket the HTTP/1.1 parser reads: over TLS the TLS socket, from
  // the end of its handshake (the handshake has its own deadline: protocols.js).
  if (deadlines !== null) {
    const secure = options.protocol === contract.PROTOCOL_H1_TLS;
    server.on(secure ? 'secureConnection' : 'connection', (socket) => {
      deadlines.opened(socket);
      socket.once('close', () => deadlines.forget(socket));
    });
    // An upgraded WebSocket may stay idle for the whole run (this listener runs before ws's).
    server.on('upgrade', (req, socket) => deadlines.forget(socket));
  }
  // HTTP/2 at shutdown: each session is closed with a GOAWAY, then its TCP socket destroyed
  // if it is still open (session.destroy() waits for the peer to end a half-closed socket).
  const sessions = new Set();
  const sockets = new Set();
  if (http2) {
    server.on('session', (session) => {
      sessions.add(session);
      session.once('close', () => sessions.delete(session));
    });
    server.on('connection', (socket) => {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
    });
  }
  const websockets = new WebSockets(server, backends);
  const mcService = options.mcSocketPort === null ? null : new MemcachedSocketService(pool, state);

  try {
    state.port = await listen(server, options.host, options.port);
    if (mcService !== null) {
      state.mcPort = await listen(mcService.server, options.host, options.mcSocketPort);
    }
  } catch (error) {
    process.stderr.write(`servers: cannot listen on ${options.host}: ${error.message}\n`);
    process.exit(1);
  }

  state.start();
  state.emitTelemetry(); // the first line says the port is listening
  const telemetryTimer = setInterval(() => state.emitTelemetry(), contract.TELEMETRY_INTERVAL_MS);

  let stopping = false;
  function shutdown() {
    if (stopping) return;
    stopping = true;
    clearInterval(telemetryTimer);
    setTimeout(() => {
      process.stderr.write('servers: shutdown did not finish in time\n');
      process.exit(1);
    }, GIVE_UP_AFTER_MS).unref();

    let closeIdle = null;
    if (http2) {
      // GOAWAY: the streams in flight finish, no new one starts, then the session closes.
      for (const session of sessions) session.close();
    } else {
      // Busy keep-alive connections end after their response: the requests still to come
      // are answered with Connection: close, and whatever turns idle meanwhile is closed.
      server.prependListener('request', (req, res) => res.setHeader('Connection', 'close'));
      closeIdle = setInterval(() => server.closeIdleConnections(), IDLE_SWEEP_MS);
    }
    const closed = [new Promise((resolve) => server.close(resolve))]; // idle keep-alive ones too
    if (mcService !== null) {
      closed.push(new Promise((resolve) => mcService.server.close(resolve)));
      mcService.close();
    }
    websockets.closeAll();
    const force = setTimeout(() => {
      if (http2) for (const socket of sockets) socket.destroy();
      else server.closeAllConnections();
      websockets.terminateAll();
      if (mcService !== null) mcService.destroy();
    }, FORCE_CLOSE_AFTER_MS);

    Promise.all(closed)
      .then(async () => {
        clearTimeout(force);
        if (closeIdle !== null) clearInterval(closeIdle);
        await backends.sink.close();
        pool.close();
        await mongo.close(MONGO_CLOSE_TIMEOUT_MS);
        state.stop();
      })
      .then(
        () => state.emitTelemetry(() => process.exit(0)),
        (error) => {
          process.stderr.write(`servers: shutdown failed: ${error.stack}\n`);
          process.exit(1);
        },
      );
  }
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  if (cluster.isWorker) process.on('disconnect', shutdown); // the primary is gone
}

/**
 * The cluster primary: fork the workers, forward signals, exit 0 when all exit 0. A worker
 * that dies unasked stops the server, as the Python supervisor does (servers/__main__.py):
 * it is named on stderr, the others are stopped and the primary exits 1.
 */
function runPrimary(options) {
  let worst = 0;
  let running = options.workers;
  let stopping = false;
  const indexOf = new Map(); // cluster worker id -> the contract's worker number
  for (let i = 0; i < options.workers; i += 1) {
    indexOf.set(cluster.fork({ SERVER_WORKER: String(i) }).id, i);
  }
  function forward(signal) {
    for (const worker of Object.values(cluster.workers)) {
      if (!worker.isDead()) worker.process.kill(signal);
    }
  }
  cluster.on('exit', (worker, code, signal) => {
    if (code !== 0 || signal) worst = 1;
    running -= 1;
    if (!stopping) {
      stopping = true;
      worst = 1;
      const how = signal ? `was killed by ${signal}` : `exited with status ${code}`;
      process.stderr.write(
        `servers: worker ${indexOf.get(worker.id)} (pid ${worker.process.pid}) ${how}: ` +
          'stopping the other workers\n',
      );
      forward('SIGTERM');
    }
    if (running === 0) process.exit(worst);
  });
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
      stopping = true;
      forward(signal);
    });
  }
}

function main() {
  let options;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`servers: ${error.message}\n`);
    process.exit(2);
  }
  if (cluster.isPrimary && options.workers > 1) {
    runPrimary(options);
  } else {
    runWorker(options, cluster.isWorker ? Number(process.env.SERVER_WORKER) : 0);
  }
}

main();
