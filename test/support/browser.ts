import { chromium, type Browser } from 'playwright-core';

/** Debian's Chromium (installed by scripts/setup.sh), headless, with nothing reaching outside the machine. */
export const CHROMIUM = process.env.STEPWISE_CHROMIUM ?? '/usr/bin/chromium';

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}
