'use strict';
// The minimal WebSocket server of the Node baselines (`harness bench --ws`): the `ws`
// package they use (websocket.js), as its README's echo server writes it, on /ws.
// `node minimal_ws.js --host H --port P [--workers N]` (port 0: the OS picks). With N > 1
// this process is a cluster primary forking N of it on one port (Node 20 has no
// SO_REUSEPORT: the primary hands connections out round-robin, as server.js's workers).

const cluster = require('node:cluster');
const { WebSocketServer } = require('ws');

function option(name, fallback) {
  const index = process.argv.indexOf(name);
  return index >= 0 ? process.argv[index + 1] : fallback;
}

function serve() {
  const server = new WebSocketServer({
    host: option('--host', '127.0.0.1'),
    port: Number(option('--port', '0')),
    path: '/ws',
  });
  server.on('connection', (ws) => {
    ws.on('error', () => {});
    ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  });
}

// The primary: forward SIGTERM/SIGINT; a worker that ends unasked ends them all (exit 1).
function supervise(workers) {
  let stopping = false;
  let running = workers;
  const stopAll = (signal) => {
    for (const worker of Object.values(cluster.workers)) {
      if (!worker.isDead()) worker.process.kill(signal);
    }
  };
  for (let i = 0; i < workers; i += 1) cluster.fork();
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
      stopping = true;
      stopAll(signal);
    });
  }
  cluster.on('exit', () => {
    running -= 1;
    if (!stopping) {
      stopping = true;
      process.exitCode = 1;
      stopAll('SIGTERM');
    }
    if (running === 0) process.exit();
  });
}

const workers = Number(option('--workers', '1'));
if (cluster.isPrimary && workers > 1) supervise(workers);
else serve();
