'use strict';
// One MongoDB client per process, shared by the mongo sink and /gridfs, made on first use.
//
// The official driver connects on its first operation, so a server whose database is down
// starts, serves `/`, and answers the routes that need the database 503 (each operation
// gives up after contract.MONGO_SERVER_SELECTION_TIMEOUT_MS); a later operation tries again.

const contract = require('./contract');

class LazyMongo {
  /**
   * @param {?string} url `--mongo-url`; the sinks' default when not given
   * @param {string} database `--mongo-db`: the sink's records and GridFS's bucket
   */
  constructor(url, database) {
    this.url = url || contract.DEFAULT_MONGO_URL;
    this.database = database;
    this._client = null;
  }

  /** The `--mongo-db` database, on the client made on first use. */
  db() {
    return this.client().db(this.database);
  }

  /** The client, created (without I/O) the first time it is asked for. */
  client() {
    if (this._client === null) {
      const { MongoClient } = require('mongodb'); // loaded only by servers that use it
      this._client = new MongoClient(this.url, {
        serverSelectionTimeoutMS: contract.MONGO_SERVER_SELECTION_TIMEOUT_MS,
      });
      // Monitoring errors surface on the operations that need the server; never crash on them.
      this._client.on('error', () => {});
    }
    return this._client;
  }

  /** Close the client if one was made (shutdown), waiting at most `timeoutMs`. */
  async close(timeoutMs) {
    if (this._client === null) return;
    const client = this._client;
    this._client = null;
    let timer;
    const expired = new Promise((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    try {
      await Promise.race([client.close().catch(() => {}), expired]);
    } finally {
      clearTimeout(timer);
    }
  }
}

module.exports = { LazyMongo };
