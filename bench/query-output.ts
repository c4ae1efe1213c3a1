import { rng } from './chaos/random.ts';

const FIRST = ['Ada', 'Bruno', 'Chiara', 'Dmitri', 'Elif', 'Farah', 'Goran', 'Hana', 'Ivo', 'Jun', 'Kemal', 'Lena', 'Mateo', 'Nadia', 'Oskar', 'Priya', 'Quinn', 'Rosa', 'Sven', 'Tomás', 'Uma', 'Viktor', 'Wen', 'Yusuf', 'Zofia'];
const LAST = ['Alvarez', 'Bauer', 'Chen', 'Dubois', 'Eriksen', 'Fischer', 'García', 'Horvat', 'Ivanova', 'Jensen', 'Kowalski', 'Lindqvist', 'Moreau', 'Novak', 'Okafor', 'Petrov', 'Rossi', 'Schmidt', 'Tanaka', 'Varga', 'Weber', 'Yilmaz'];
const CITIES = ['Lisbon', 'Oslo', 'Porto', 'Kraków', 'Lyon', 'Ghent', 'Turin', 'Tartu', 'Malmö', 'Graz', 'Bilbao', 'Leeds', 'Utrecht', 'Brno', 'Aarhus'];
const STATUSES = ['paid', 'pending', 'refunded', 'shipped', 'cancelled', 'disputed'];
const WORDS = ['late', 'delivery', 'gift', 'wrap', 'call', 'before', 'fragile', 'second', 'attempt', 'customer', 'asked', 'invoice', 'address', 'changed', 'partial', 'refund', 'backorder', 'priority', 'weekend', 'pickup'];

/**
 * What a database tool returns: `bytes` of JSON rows of a query result (orders with names, emails,
 * amounts, timestamps, free-text notes), varied and reproducible from the step number. Real tool output
 * compresses about as well as this; a run of one repeated character would compress a thousandfold.
 */
export function queryOutput(step: number, bytes: number): string {
  const r = rng(0x5eed ^ Math.imul(step, 2654435761));
  const rows: string[] = [];
  let size = 2;
  for (let id = 1; size < bytes; id++) {
    const first = r.pick(FIRST);
    const last = r.pick(LAST);
    const note = Array.from({ length: r.int(0, 6) }, () => r.pick(WORDS)).join(' ');
    const row = JSON.stringify({
      order_id: 100_000 + step * 1000 + id,
      customer: `${first} ${last}`,
      email: `${first.toLowerCase()}.${last.toLowerCase()}${r.int(1, 99)}@example.${r.pick(['com', 'org', 'net', 'io'])}`,
      city: r.pick(CITIES),
      status: r.pick(STATUSES),
      items: r.int(1, 12),
      total_cents: r.int(199, 250_000),
      created_at: new Date(Date.UTC(2025, r.int(0, 11), r.int(1, 28), r.int(0, 23), r.int(0, 59), r.int(0, 59))).toISOString(),
      sku: `SKU-${r.int(0, 0xffffff).toString(16).toUpperCase().padStart(6, '0')}`,
      note,
    });
    rows.push(row);
    size += row.length + 1;
  }
  return `[${rows.join(',')}]`.slice(0, bytes);
}

const made = new Map<string, string>();

/**
 * queryOutput, made once per step and size and then handed out as it is: making 20 KB of rows takes about
 * 0.3 ms, the tool's own work, which a bench of a runtime's overhead must not time at every step.
 */
export function cachedQueryOutput(step: number, bytes: number): string {
  const key = `${step}/${bytes}`;
  let text = made.get(key);
  if (text === undefined) made.set(key, (text = queryOutput(step, bytes)));
  return text;
}
