// A real OpenID provider for onsale's tokens: `node provider.mjs PORT KEYS CLIENTS`.
// KEYS: a JWKS of private keys (keys.mjs), the first signs. CLIENTS: [{ "client_id", "client_secret",
// "role", "verified"?, "venue"?, "shows"? }]: each a machine client (client_credentials) whose
// access tokens are JWTs for the audience onsale-api, with sub = its client_id, its role and,
// for a scanner, the venue or shows it may scan. The issuer is http://127.0.0.1:PORT; its
// discovery document names its JWKS, which onsale fetches.
import fs from 'node:fs';
import Provider from 'oidc-provider';

const [port, keysFile, clientsFile] = process.argv.slice(2);
const jwks = JSON.parse(fs.readFileSync(keysFile, 'utf8'));
const clients = JSON.parse(fs.readFileSync(clientsFile, 'utf8'));
const byId = new Map(clients.map((c) => [c.client_id, c]));
const audience = process.env.ONSALE_JWT_AUDIENCE || 'onsale-api';
const ttl = Number(process.env.OIDC_TOKEN_TTL_SECS || 600);

const provider = new Provider(`http://127.0.0.1:${port}`, {
  jwks,
  clients: clients.map((c) => ({
    client_id: c.client_id,
    client_secret: c.client_secret,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    id_token_signed_response_alg: jwks.keys[0].alg,
  })),
  features: {
    clientCredentials: { enabled: true },
    devInteractions: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => 'urn:onsale:api',
      useGrantedResource: () => true,
      getResourceServerInfo: () => ({
        audience,
        scope: 'onsale',
        accessTokenFormat: 'jwt',
        accessTokenTTL: ttl,
        jwt: { sign: { alg: jwks.keys[0].alg } },
      }),
    },
  },
  extraTokenClaims: (ctx, token) => {
    const c = byId.get(token.clientId);
    if (!c) return undefined;
    const claims = { role: c.role };
    if (c.verified) claims.verified = true;
    if (c.venue) claims.venue = c.venue;
    if (c.shows) claims.shows = c.shows;
    return claims;
  },
});
provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`oidc-provider on http://127.0.0.1:${port} signing with ${jwks.keys[0].kid}`);
});
