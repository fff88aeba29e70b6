// Copies the repository's .proto files (../../proto) into this package's
// proto/ folder, which lib/client.js loads and package.json ships, so the
// source tree and an installed tarball read the same files. The copies are
// committed; `--check` (run by test.sh and before `npm pack`) fails when they
// differ from the repository's, so they cannot drift.
//
//   node scripts/sync-protos.js            copy (and delete copies whose source is gone)
//   node scripts/sync-protos.js --check    compare only; exit 1 on any difference

import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
const SOURCE = join(PACKAGE_DIR, '..', '..', 'proto');
const TARGET = join(PACKAGE_DIR, 'proto');

/** The .proto files under dir, as paths relative to it ('redq/v1/queue.proto'), sorted. */
function protoFiles(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.proto'))
    .map((entry) => relative(dir, join(entry.parentPath ?? entry.path, entry.name)))
    .sort();
}

/** What differs between the repository's protos and the copies: [path, why] pairs. */
function differences() {
  const sources = protoFiles(SOURCE);
  const copies = new Set(protoFiles(TARGET));
  const found = [];
  for (const path of sources) {
    if (!copies.has(path)) found.push([path, 'missing']);
    else if (!readFileSync(join(SOURCE, path)).equals(readFileSync(join(TARGET, path)))) found.push([path, 'differs']);
    copies.delete(path);
  }
  for (const path of copies) found.push([path, 'not in the repository']);
  return found;
}

const check = process.argv.includes('--check');
if (protoFiles(SOURCE).length === 0) {
  console.error(`sync-protos: no .proto files in ${SOURCE} (run it inside the redq repository)`);
  process.exit(2);
}
const found = differences();
if (check) {
  if (found.length > 0) {
    for (const [path, why] of found) console.error(`sync-protos: proto/${path}: ${why}`);
    console.error('sync-protos: the package\'s protos differ from the repository\'s: run `node scripts/sync-protos.js`');
    process.exit(1);
  }
  console.log(`sync-protos: proto/ matches ${relative(PACKAGE_DIR, SOURCE)} (${protoFiles(TARGET).length} files)`);
} else {
  for (const [path, why] of found) {
    const target = join(TARGET, path);
    if (why === 'not in the repository') {
      rmSync(target);
    } else {
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, readFileSync(join(SOURCE, path)));
    }
    console.log(`sync-protos: proto/${path}: ${why === 'not in the repository' ? 'deleted' : 'copied'}`);
  }
}
