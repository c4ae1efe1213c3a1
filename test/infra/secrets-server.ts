import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local stand-in for the one Secrets Manager call stepwise makes (GetSecretValue, JSON protocol), over a
 * real HTTP connection with the real SDK client (AWS_ENDPOINT_URL_SECRETS_MANAGER). Records what was read.
 */
export async function startSecretsServer(secrets: Record<string, string>): Promise<{ endpoint: string; reads: string[]; stop(): Promise<void> }> {
  const reads: string[] = [];
  const server = createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk: Buffer) => { raw += chunk.toString('utf8'); });
    req.on('end', () => {
      const target = String(req.headers['x-amz-target'] ?? '');
      const reply = (status: number, body: unknown, type?: string) => {
        res.writeHead(status, { 'content-type': 'application/x-amz-json-1.1', ...(type ? { 'x-amzn-errortype': type } : {}) }).end(JSON.stringify(body));
      };
      if (req.method !== 'POST' || target !== 'secretsmanager.GetSecretValue') return reply(400, { __type: 'UnknownOperationException', message: target }, 'UnknownOperationException');
      const { SecretId } = JSON.parse(raw) as { SecretId: string };
      reads.push(SecretId);
      const value = secrets[SecretId];
      if (value === undefined) return reply(400, { __type: 'ResourceNotFoundException', message: `no secret ${SecretId}` }, 'ResourceNotFoundException');
      return reply(200, { ARN: SecretId, Name: SecretId, SecretString: value, VersionId: 'v1', VersionStages: ['AWSCURRENT'], CreatedDate: 0 });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { endpoint: `http://127.0.0.1:${port}`, reads, stop: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}
