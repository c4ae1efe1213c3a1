import { SendEmailCommand, type SESv2Client } from '@aws-sdk/client-sesv2';
import type { Notification, Notifier } from '../ports.ts';

/**
 * Email through SES v2. SES has no idempotency token, so "once per wait" is the caller's: the wait driver
 * sends each notification inside the idempotency ledger, keyed by its id.
 */
export class SesNotifier implements Notifier {
  constructor(private readonly options: { ses: SESv2Client; from: string; configurationSet?: string }) {}

  async send(n: Notification): Promise<void> {
    await this.options.ses.send(new SendEmailCommand({
      FromEmailAddress: this.options.from,
      Destination: { ToAddresses: [n.to] },
      Content: {
        Simple: {
          Subject: { Data: n.subject, Charset: 'UTF-8' },
          Body: { Text: { Data: n.text, Charset: 'UTF-8' }, Html: { Data: n.html, Charset: 'UTF-8' } },
        },
      },
      ...(this.options.configurationSet ? { ConfigurationSetName: this.options.configurationSet } : {}),
      EmailTags: [{ Name: 'stepwise', Value: 'approval' }],
    }));
  }
}
