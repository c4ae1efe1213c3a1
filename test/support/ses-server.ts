import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface SentEmail {
  from: string;
  to: string[];
  subject: string;
  text: string;
  html: string;
  body: Record<string, any>;
}

/**
 * A local stand-in for the one SES v2 call stepwise makes (SendEmail: POST /v2/email/outbound-emails),
 * over a real HTTP connection with the real SDK client, recording what would have been sent.
 * `failNext` answers the next sends with a 500 (the SDK retries those); `reject` refuses every send to an
 * address as SES refuses one it will not send to (a 400 MessageRejected, which the SDK does not retry).
 */
export async function startSesServer(): Promise<{ endpoint: string; sent: SentEmail[]; failNext(n: number): void; reject(address: string): void; stop(): Promise<void> }> {
  const sent: SentEmail[] = [];
  const rejected = new Set<string>();
  let failures = 0;
  const server = createServer(async (req, res) => {
    const raw = await readBody(req);
    if (req.method !== 'POST' || req.url !== '/v2/email/outbound-emails') {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ message: `no route ${req.method} ${req.url}` }));
      return;
    }
    if (failures > 0) {
      failures -= 1;
      res.writeHead(500, { 'content-type': 'application/json', 'x-amzn-errortype': 'InternalFailure' }).end('{"message":"internal failure"}');
      return;
    }
    const body = JSON.parse(raw) as Record<string, any>;
    const refused = (body.Destination?.ToAddresses ?? []).find((to: string) => rejected.has(to));
    if (refused) {
      res.writeHead(400, { 'content-type': 'application/json', 'x-amzn-errortype': 'MessageRejected' })
        .end(JSON.stringify({ message: `Email address is not verified. The following identities failed the check in region US-EAST-1: ${refused}` }));
      return;
    }
    const simple = body.Content?.Simple ?? {};
    sent.push({
      from: body.FromEmailAddress, to: body.Destination?.ToAddresses ?? [], subject: simple.Subject?.Data ?? '',
      text: simple.Body?.Text?.Data ?? '', html: simple.Body?.Html?.Data ?? '', body,
    });
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ MessageId: `msg-${sent.length}` }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`, sent, failNext: (n) => { failures = n; }, reject: (address) => { rejected.add(address); },
    stop: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
