// The provider's signing keys (a JWKS of private keys, the first one signs), in FILE:
//   node keys.mjs add FILE [EdDSA|ES256|RS256]   a new key, first: it signs from the next start
//   node keys.mjs retire FILE                      the oldest key leaves the set
// A key stays in the set (its tokens still verify) until it is retired.
import fs from 'node:fs';
import crypto from 'node:crypto';
import { exportJWK, generateKeyPair } from 'jose';

const [command, file, alg = 'EdDSA'] = process.argv.slice(2);
const set = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : { keys: [] };
if (command === 'add') {
  const { privateKey } = await generateKeyPair(alg, { extractable: true, crv: alg === 'EdDSA' ? 'Ed25519' : undefined });
  const jwk = await exportJWK(privateKey);
  set.keys.unshift({ ...jwk, alg, use: 'sig', kid: crypto.randomUUID() });
} else if (command === 'retire') {
  if (set.keys.length < 2) throw new Error('the last key is never retired');
  set.keys.pop();
} else {
  throw new Error('usage: keys.mjs add|retire FILE [alg]');
}
fs.writeFileSync(file, JSON.stringify(set), { mode: 0o600 });
console.log(set.keys.map((k) => k.kid).join(' '));
