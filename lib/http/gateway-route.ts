import { MALFORMED_LINK } from '../waits/approval-token.ts';

/** The one route API Gateway serves without IAM (infra/stepwise-construct.ts): an approval page, its token the credential. */
const PUBLIC_ROUTE = /^(?:GET|POST) \/approvals\/\{token\}$/;

/**
 * Whether a request the gateway let through on the public route would reach another route of the app. The
 * gateway matches `{token}` against one segment of the path as sent, but hands over `rawPath` decoded, and
 * the Lambda adapter reads it as a URL, which resolves dot segments and backslashes: `/approvals/..%2Fruns`
 * arrives as `/approvals/../runs` and is routed as `/runs`, a route only IAM guards (on AWS no bearer token
 * stands behind it).
 */
export function escapesPublicRoute(event: { routeKey: string; rawPath: string }): boolean {
  if (!PUBLIC_ROUTE.test(event.routeKey)) return false;
  let path: string;
  try {
    path = new URL(`https://gateway.invalid${event.rawPath}`).pathname;
  } catch {
    return true;
  }
  return !/^\/approvals\/[^/]+$/.test(path);
}

/** The answer to such a request: what any other unknown approval path gets, with nothing read or changed. */
export const ESCAPED_ROUTE_RESPONSE = {
  statusCode: 400,
  headers: { 'content-type': 'application/json; charset=UTF-8', 'cache-control': 'no-store' },
  body: JSON.stringify({ error: MALFORMED_LINK }),
  isBase64Encoded: false,
};
