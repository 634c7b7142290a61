// The Probot side of bench/intake.py: Probot's own webhook middleware (signature check,
// JSON parse, event routing) behind Node's http server, one `issues.labeled` handler that
// does nothing heavy. Run by the bench with PORT and WEBHOOK_SECRET set.
import { generateKeyPairSync } from "node:crypto";
import { createServer } from "node:http";
import { Probot, createNodeMiddleware } from "probot";

// Probot insists on App credentials even when no API call is made; a throwaway key will do.
const { privateKey } = generateKeyPairSync("rsa", {
  modulusLength: 2048,
  privateKeyEncoding: { type: "pkcs1", format: "pem" },
  publicKeyEncoding: { type: "spki", format: "pem" },
});

let labeled = 0;
const appFn = (app) => {
  app.on("issues.labeled", async (context) => {
    if (context.payload.label?.name === "reqdrive") labeled += 1;
  });
};

const probot = new Probot({
  appId: 1,
  privateKey,
  secret: process.env.WEBHOOK_SECRET,
  logLevel: "warn",
});
const middleware = await createNodeMiddleware(appFn, { probot });
const server = createServer((req, res) => {
  if (req.url === "/healthz") {
    res.writeHead(200).end(String(labeled));
    return;
  }
  middleware(req, res, () => res.writeHead(404).end());
});
server.keepAliveTimeout = 65_000;
server.listen(Number(process.env.PORT), "127.0.0.1");
