'use strict';
// node-express's routing layer: Express 4 routes over the shared handlers (handlers.js).
//
// Express answers neither 405 nor the contract's 404 by itself, so each route ends with
// `.all(methodNotAllowed)` and the app with a not-found handler. Routing is case sensitive
// and strict (`/counter/` is not `/counter`), as the Python servers' routers are. Route
// parameters arrive percent-decoded by Express.

const express = require('express');

const contract = require('./contract');

/** The Express app (a request listener for http.createServer). */
function makeApp(handlers) {
  const app = express();
  app.disable('x-powered-by'); // the contract's Server header names the server
  app.set('case sensitive routing', true);
  app.set('strict routing', true);

  const notAllowed = handlers.methodNotAllowed;
  app.route(contract.ROUTE_TEXT).get(handlers.text).all(notAllowed);
  app.route(contract.ROUTE_COUNTER).get(handlers.counter).all(notAllowed);
  app.all(contract.ROUTE_LOG, (req, res) => handlers.log(req, res, req.path));
  app.route(contract.ROUTE_WEBSOCKET).get(handlers.websocketWithoutUpgrade).all(notAllowed);
  app.route(contract.ROUTE_JSON).get(handlers.json).all(notAllowed);
  app.route(contract.ROUTE_PLAINTEXT).get(handlers.plaintext).all(notAllowed);
  app
    .route(`${contract.ROUTE_DELAY_PREFIX}:ms`)
    .get((req, res) => handlers.delay(req, res, req.params.ms))
    .all(notAllowed);
  app.route(contract.ROUTE_UPLOAD).post(handlers.upload).all(notAllowed);
  app.route(contract.ROUTE_JSON_COMP).get(handlers.jsonComp).all(notAllowed);
  app.route(contract.ROUTE_BODY_10K).get(handlers.body10k).all(notAllowed);
  app
    .route(`${contract.ROUTE_FILES_PREFIX}:name`)
    .get((req, res) => handlers.files(req, res, req.params.name))
    .all(notAllowed);
  app
    .route(`${contract.ROUTE_GRIDFS_PREFIX}:name`)
    .get((req, res) => handlers.gridfs(req, res, req.params.name))
    .all(notAllowed);
  app
    .route(`${contract.ROUTE_MEMCACHED_PREFIX}:key`)
    .get((req, res) => handlers.mc(req, res, req.params.key))
    .all(notAllowed);

  app.use(handlers.notFound);
  app.use((error, req, res, next) => {
    if (res.headersSent) {
      next(error);
      return;
    }
    // Express's 400 here is a route parameter that does not percent-decode: it names no
    // file or key, so 404 as under node-http. Anything else a route threw: its status.
    const status = error.status || error.statusCode || 500;
    if (status === 400) handlers.notFound(req, res);
    else handlers.reply(res, status, contract.TEXT_CONTENT_TYPE, Buffer.from(`${status}`));
  });
  return app;
}

module.exports = { makeApp };
