import * as z from 'zod';
import { defineAgent, tool } from '../../lib/index.ts';

/**
 * The agent the project's own CDK app deploys (infra/app.ts): it drafts release notes and publishes them,
 * each publication approved by a person first: the engine emails the call, notes and all (its `approval`),
 * and publishes exactly those notes only if approved. `publish_notes` stands in for a real effect
 * (a release page, a changelog commit): it applies once per step through ctx.once.
 *
 * The approver comes from the worker's environment (the stack's ApproverEmail parameter).
 */
const approver = process.env.STEPWISE_APPROVER?.trim() || 'approver@example.com';

export default defineAgent({
  name: 'release-notes',
  settings: { stepCap: 20 },
  tools: [
    tool({
      name: 'draft_notes',
      description: 'Draft release notes for a version from a list of changes. Returns the draft text.',
      input: z.object({ version: z.string().min(1).max(40), changes: z.array(z.string().max(500)).min(1).max(50) }),
      sideEffect: false,
      run: ({ version, changes }) => [`Release ${version}`, '', ...changes.map((c) => `- ${c}`)].join('\n'),
    }),
    tool({
      name: 'publish_notes',
      description: 'Publish release notes for a version.',
      input: z.object({ version: z.string().min(1).max(40), notes: z.string().min(1).max(20_000) }),
      sideEffect: true,
      approval: { approvers: [approver], timeoutMs: 24 * 3600 * 1000 },
      run: (input, ctx) => ctx.once(async () => ({ published: input.version, bytes: Buffer.byteLength(input.notes), key: ctx.idempotencyKey })),
    }),
  ],
});
