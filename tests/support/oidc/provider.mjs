// A real OpenID Connect provider for the test suite: `oidc-provider` (npm) on this machine's
// Node.js. Started by tests/support/oidc.py with one argument, a JSON config it writes:
//   {"issuer", "port", "clients": [...], "accounts_file"}
// Accounts are read from `accounts_file` at every lookup, so a test can change a person's groups
// between two sign-ins. Sign-in and consent use the library's own development interactions
// (a login form and a "Continue" button); everything else (authorization code, PKCE, token,
// userinfo, JWKS, discovery) is the library's production code path.
import { readFileSync } from 'node:fs';

// The package lives in the suite's one node_modules (tests/support/node); ES modules do not
// search NODE_PATH, so it is imported by its path there.
const { default: Provider } = await import(
  new URL('../node/node_modules/oidc-provider/lib/index.js', import.meta.url)
);

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));

function readAccounts() {
  return JSON.parse(readFileSync(config.accounts_file, 'utf8'));
}

const provider = new Provider(config.issuer, {
  clients: config.clients,
  // The `groups` claim rides on its own scope, like most company IdPs publish it.
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name'],
    groups: ['groups'],
  },
  cookies: { keys: [config.cookie_key] },
  async findAccount(ctx, id) {
    const account = readAccounts()[id];
    if (!account) {
      return undefined;
    }
    return {
      accountId: id,
      async claims() {
        return { sub: id, ...account };
      },
    };
  },
});
// The tests talk plain HTTP on 127.0.0.1; nothing here sits behind a TLS-terminating proxy.
provider.proxy = false;

const server = provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`READY ${config.issuer}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
