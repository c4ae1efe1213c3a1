import { appendFileSync } from 'node:fs';

const file = process.env.STEPWISE_IMPORT_TRACE;

export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  if (file) appendFileSync(file, `${result.url}\n`);
  return result;
}
