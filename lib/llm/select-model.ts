import type { AgentDefinition } from '../agent.ts';
import { redactUrl } from '../core/redact.ts';
import { AnthropicModel, type AnthropicModelOptions } from './anthropic.ts';
import { apiKeyFromEnv } from './api-key.ts';
import { offlineSelection } from './offline-model.ts';
import type { SelectedModel } from './selected-model.ts';

export type { SelectedModel } from './selected-model.ts';

/**
 * The model for a run: Claude when an API key is configured (ANTHROPIC_API_KEY, or a Secrets Manager
 * secret id on AWS), else the agent's offline scripted model, said plainly so nobody mistakes a demo
 * for Claude. ANTHROPIC_BASE_URL points the client elsewhere (a local test server, a gateway).
 */
export function selectModel(
  agent: AgentDefinition,
  env: NodeJS.ProcessEnv = process.env,
  options: Omit<AnthropicModelOptions, 'apiKey' | 'env'> = {},
): SelectedModel {
  const key = apiKeyFromEnv(env);
  if (key) {
    const model = new AnthropicModel({ ...options, env, apiKey: key.source, ...(agent.settings?.model ? { model: agent.settings.model } : {}) });
    const where = options.baseURL ?? env.ANTHROPIC_BASE_URL?.trim();
    return {
      model,
      kind: 'anthropic',
      // The label is printed and logged: a gateway URL may carry credentials or a token.
      label: `Anthropic ${model.defaultModel} (key from ${key.from}${where ? `, API at ${redactUrl(where)}` : ''})`,
    };
  }
  return offlineSelection(agent);
}
