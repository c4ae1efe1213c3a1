import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

describe('npm run demo', () => {
  it('kills its worker mid-step, resumes on a fresh process, waits for approval, and copies every row exactly once', { timeout: 300_000 }, () => {
    const r = spawnSync('npm', ['run', '--silent', 'demo'], { cwd: ROOT, encoding: 'utf8', timeout: 240_000, env: { ...process.env, ANTHROPIC_API_KEY: '' } });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('model: offline scripted model (no ANTHROPIC_API_KEY)');
    expect(r.stdout).toMatch(/worker A \(pid \d+\) killed with SIGKILL in the middle of step 6/);
    expect(r.stdout).toMatch(/"applied":false,.*"note":"already applied under this idempotency key"/);
    expect(r.stdout).toContain('source rows 1000, target rows 1000, distinct 1000, duplicates 0, missing 0, mismatched 0');
    expect(r.stdout).toContain('effects applied 11, once each: 10 batches copied, 1 table dropped');
    expect(r.stdout).toContain('every row was copied exactly once: yes');
    // The risky step waited for approval with no process running; the link points at stepwise serve.
    expect(r.stdout).toMatch(/its link: http:\/\/127\.0\.0\.1:\d+\/approvals\/v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/);
    expect(r.stdout).toMatch(/approving from the terminal \(stepwise approve migrate-\d+\)\n  run migrate-\d+: approved; it continues/);
    expect(r.stdout).toContain('With approval from ops@example.com, the source table was dropped.');
    const history = r.stdout.slice(r.stdout.indexOf('6. the checkpoint history'), r.stdout.indexOf('7. the run'));
    expect(history).toMatch(/\n\d+\s+12\s+waiting\s/);
    // The run changed hands at the approval: the worker that paused is not the one that finished.
    const pausedBy = /\n\d+\s+12\s+waiting\s+(\S+)/.exec(history)![1];
    const finishedBy = /drop_source\s+\S+\/step-14\s+(\S+)/.exec(history)![1];
    expect(finishedBy).not.toBe(pausedBy);
    // Both workers wrote checkpoints: the history shows the run changing hands at step 6.
    const workers = [...history.matchAll(/copy_batch\s+\S+\/step-(\d+)\s+(\S+)/g)].map((m) => [Number(m[1]), m[2]] as const);
    expect(new Set(workers.filter(([step]) => step < 6).map(([, w]) => w)).size).toBe(1);
    expect(workers.find(([step]) => step === 6)![1]).not.toBe(workers.find(([step]) => step === 5)![1]);
  });

  it('--help says what it does and runs nothing; a mistyped option is refused with the usage', () => {
    const help = spawnSync('npm', ['run', '--silent', 'demo', '--', '--help'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm run demo \[-- --approve\]\n/);
    expect(help.stdout).not.toContain('started run');
    const typo = spawnSync('npm', ['run', '--silent', 'demo', '--', '--aprove'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(typo.status).toBe(2);
    expect(typo.stderr).toMatch(/^demo: Unknown option '--aprove'/);
    expect(typo.stderr).toContain('usage: npm run demo');
    expect(typo.stdout).toBe('');
  });
});
