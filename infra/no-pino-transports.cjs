// Stands in for pino's thread-stream in the Lambda bundles (infra/worker-bundle.ts): stepwise logs with
// pino's synchronous destination and never starts a transport, the one thing thread-stream is for, and
// leaving it out keeps the worker's bundle under 1 MB. A transport asked for says so, rather than failing
// somewhere inside.
module.exports = class ThreadStream {
  constructor() {
    throw new Error('stepwise bundles no pino transports: log lines go to stdout and stderr');
  }
};
