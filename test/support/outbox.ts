import { readOutbox } from '../../lib/waits/outbox-notifier.ts';

/** The emails in a local outbox folder: recipient, subject, text and the approval link of each. */
export function outboxEmails(dir: string): { to: string; subject: string; text: string; link: string }[] {
  return readOutbox(dir).map((e) => ({ to: e.to, subject: e.subject, text: e.text, link: e.link ?? '' }));
}
