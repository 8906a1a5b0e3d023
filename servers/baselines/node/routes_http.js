'use strict';
// node-http's routing layer: one request listener on core `http`, a switch on the path.
// Unknown paths are 404, a known path asked with a method it does not serve is 405.

const contract = require('./contract');
const { decodeName } = require('./static');

function isGet(method) {
  return method === 'GET' || method === 'HEAD';
}

/** The request listener over the shared handlers (handlers.js). */
function makeRequestListener(handlers) {
  const prefixes = [
    [contract.ROUTE_FILES_PREFIX, handlers.files],
    [contract.ROUTE_GRIDFS_PREFIX, handlers.gridfs],
    [contract.ROUTE_MEMCACHED_PREFIX, handlers.mc],
  ];
  const workloads = {
    [contract.ROUTE_JSON]: handlers.json,
    [contract.ROUTE_PLAINTEXT]: handlers.plaintext,
    [contract.ROUTE_JSON_COMP]: handlers.jsonComp,
    [contract.ROUTE_BODY_10K]: handlers.body10k,
  };

  return function onRequest(req, res) {
    const url = req.url;
    const query = url.indexOf('?');
    const path = query < 0 ? url : url.slice(0, query);
    switch (path) {
      case contract.ROUTE_TEXT:
        if (isGet(req.method)) handlers.text(req, res);
        else handlers.methodNotAllowed(req, res);
        return;
      case contract.ROUTE_COUNTER:
        if (isGet(req.method)) handlers.counter(req, res);
        else handlers.methodNotAllowed(req, res);
        return;
      case contract.ROUTE_LOG:
        handlers.log(req, res, path);
        return;
      case contract.ROUTE_JSON:
      case contract.ROUTE_PLAINTEXT:
      case contract.ROUTE_JSON_COMP:
      case contract.ROUTE_BODY_10K:
        if (isGet(req.method)) workloads[path](req, res);
        else handlers.methodNotAllowed(req, res);
        return;
      case contract.ROUTE_UPLOAD:
        if (req.method === 'POST') handlers.upload(req, res);
        else handlers.methodNotAllowed(req, res);
        return;
      case contract.ROUTE_WEBSOCKET: // a plain request: upgrades never reach this listener
        if (isGet(req.method)) handlers.websocketWithoutUpgrade(req, res);
        else handlers.methodNotAllowed(req, res);
        return;
      default:
    }
    if (path.startsWith(contract.ROUTE_DELAY_PREFIX)) {
      if (isGet(req.method)) handlers.delay(req, res, path.slice(contract.ROUTE_DELAY_PREFIX.length));
      else handlers.methodNotAllowed(req, res);
      return;
    }
    for (const [prefix, handler] of prefixes) {
      if (path.startsWith(prefix)) {
        const segment = path.slice(prefix.length);
        if (segment.length === 0 || segment.includes('/')) handlers.notFound(req, res);
        else if (!isGet(req.method)) handlers.methodNotAllowed(req, res);
        else handler(req, res, decodeName(segment));
        return;
      }
    }
    handlers.notFound(req, res);
  };
}

module.exports = { makeRequestListener };
