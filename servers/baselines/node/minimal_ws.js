'use strict';
// The minimal WebSocket server of the Node baselines (`harness bench --ws`): the `ws`
// package they use (websocket.js), as its README's echo server writes it, on /ws.
// `node minimal_ws.js --host H --port P` (port 0: the OS picks).

const { WebSocketServer } = require('ws');

function option(name, fallback) {
  const index = process.argv.indexOf(name);
  return index >= 0 ? process.argv[index + 1] : fallback;
}

const server = new WebSocketServer({
  host: option('--host', '127.0.0.1'),
  port: Number(option('--port', '0')),
  path: '/ws',
});
server.on('connection', (ws) => {
  ws.on('error', () => {});
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
});
