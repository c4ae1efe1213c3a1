import type { AgentDefinition } from '../agent.ts';
import { InvalidInputError } from '../core/errors.ts';
import type { Model } from '../ports.ts';
import { redactUrl } from '../redact.ts';
import type { AnthropicModelOptions } from './anthropic.ts';
import { API_KEY_ENV, API_KEY_SECRET_ENV, apiKeyFromEnv } from './api-key.ts';

export interface SelectedModel {
  model: Model;
  kind: 'anthropic' | 'offline';
  /** One line for people: which model runs and why (printed by the CLI, logged by workers). */
  label: string;
}

/**
 * The model for a run: Claude when an API key is configured (ANTHROPIC_API_KEY, or a Secrets Manager
 * secret id on AWS), else the agent's offline scripted model, said plainly so nobody mistakes a demo
 * for Claude. ANTHROPIC_BASE_URL points the client elsewhere (a local test server, a gateway).
 * Asynchronous because the Anthropic SDK is imported only when Claude is chosen.
 */
export async function selectModel(
  agent: AgentDefinition,
  env: NodeJS.ProcessEnv = process.env,
  options: Omit<AnthropicModelOptions, 'apiKey' | 'env'> = {},
): Promise<SelectedModel> {
  const key = apiKeyFromEnv(env);
  if (key) {
    const { AnthropicModel } = await import('./anthropic.ts');
    const model = new AnthropicModel({ ...options, env, apiKey: key.source, ...(agent.settings?.model ? { model: agent.settings.model } : {}) });
    const where = options.baseURL ?? env.ANTHROPIC_BASE_URL?.trim();
    return {
      model,
      kind: 'anthropic',
      // The label is printed and logged: a gateway URL may carry credentials or a token.
      label: `Anthropic ${model.defaultModel} (key from ${key.from}${where ? `, API at ${redactUrl(where)}` : ''})`,
    };
  }
  if (agent.offlineModel) {
    const model = agent.offlineModel();
    return {
      model,
      kind: 'offline',
      label: `offline scripted model "${model.name}" of agent ${agent.name}, not Claude (set ${API_KEY_ENV} to use Claude)`,
    };
  }
  throw new InvalidInputError(
    `no model for agent ${agent.name}: set ${API_KEY_ENV} (or ${API_KEY_SECRET_ENV} on AWS) to use Claude, or give the agent an offlineModel()`,
  );
}
