'use strict';
// `/files/{name}` and the name rule `/gridfs/{name}` shares (servers/core/static.py).
//
// A name is one path segment matching contract.FILE_NAME_PATTERN, which refuses `../`,
// encoded slashes (after decoding), absolute paths, empty names and hidden files before the
// file system is touched; the resolved path must also stay directly inside the directory
// (a symlink pointing out of it is 404). The file system calls run on libuv's thread
// pool, never on the loop: the files are small (≤ 64 KiB) and page-cached, so one
// readFile after realpath and stat beats a stream.

const fs = require('node:fs');
const path = require('node:path');

const contract = require('./contract');

/** Whether `name` (the part after /files/ or /gridfs/) may name a file at all. */
function validName(name) {
  return contract.FILE_NAME_PATTERN.test(name);
}

/** The Content-Type for a file name, by extension. */
function contentType(name) {
  const types = contract.FILE_CONTENT_TYPES;
  const extension = path.extname(name).toLowerCase();
  return Object.hasOwn(types, extension) ? types[extension] : contract.DEFAULT_CONTENT_TYPE;
}

/**
 * The raw path segment after a route prefix, percent-decoded; null when it does not decode.
 * Python's frameworks decode the path before routing, so `%2e%2e%2f` is judged as `../`.
 */
function decodeName(raw) {
  try {
    return decodeURIComponent(raw);
  } catch {
    return null;
  }
}

class StaticFiles {
  /** @param {?string} filesDir `--files-dir`; without it every name is 404 */
  constructor(filesDir) {
    this._dir = filesDir;
    this._root = null;
  }

  _realRoot() {
    if (this._root === null && this._dir) {
      try {
        this._root = fs.realpathSync(this._dir); // once: the directory does not move
      } catch {
        return null; // not there (yet): 404, and look again next time
      }
    }
    return this._root;
  }

  /**
   * Call `done(file)` with {body, contentType} for the regular file `name` directly under
   * the directory, or `done(null)` (404) — never a file outside it.
   */
  read(name, done) {
    const root = validName(name) ? this._realRoot() : null;
    if (root === null) {
      done(null);
      return;
    }
    fs.realpath(path.join(root, name), (realError, real) => {
      if (realError || path.dirname(real) !== root) {
        done(null);
        return;
      }
      fs.stat(real, (statError, info) => {
        if (statError || !info.isFile()) {
          done(null); // a directory, FIFO or device is not a file to serve
          return;
        }
        fs.readFile(real, (readError, body) => {
          done(readError ? null : { body, contentType: contentType(name) });
        });
      });
    });
  }
}

module.exports = { StaticFiles, validName, contentType, decodeName };
