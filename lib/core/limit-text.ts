/**
 * A step cap and a budget as an operator types them: the CLI's --step-cap, --budget-tokens and --budget-usd,
 * and the inspector's Fork and Retry forms read them alike (the API's JSON body has numbers of its own).
 */

/** Digits only: Number() would also read "" as 0, and " 2", "0x2" and "2e0" as 2. */
export const DIGITS = /^\d+$/;
/** A plain decimal (dollars, days): digits, at most one point; no sign, exponent, hex or blanks. */
export const DECIMAL = /^(\d+\.?\d*|\.\d+)$/;

/** A step cap or a token budget: a whole number from 1, in digits, within what a number holds exactly; else undefined. */
export function wholeAboveZero(text: string): number | undefined {
  const n = DIGITS.test(text) ? Number(text) : Number.NaN;
  return Number.isSafeInteger(n) && n >= 1 ? n : undefined;
}

/** A dollar budget: a plain decimal above 0 (0.000001, not 1e-6); else undefined. */
export function dollarsAboveZero(text: string): number | undefined {
  const n = DECIMAL.test(text) ? Number(text) : Number.NaN;
  return Number.isFinite(n) && n > 0 ? n : undefined;
}
