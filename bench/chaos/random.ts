/** A small seeded generator (mulberry32): a schedule is a function of its seed, so any one can be replayed. */
export interface Rng {
  (): number;
  int(lo: number, hi: number): number;
  chance(p: number): boolean;
  pick<T>(xs: readonly T[]): T;
}

export function rng(seed: number): Rng {
  let s = seed >>> 0;
  const next = (() => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }) as Rng;
  next.int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  next.chance = (p) => next() < p;
  next.pick = (xs) => xs[Math.floor(next() * xs.length)]!;
  return next;
}

/** The seed of schedule i of a chaos run with base seed `seed`. */
export function scheduleSeed(seed: number, i: number): number {
  return (Math.imul(seed ^ 0x9e3779b9, 2654435761) + i * 0x85ebca6b) >>> 0;
}
