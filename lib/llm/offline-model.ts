import type { AgentDefinition } from '../agent.ts';
import { InvalidInputError } from '../core/errors.ts';
import { API_KEY_ENV, API_KEY_SECRET_ENV } from './api-key.ts';
import type { SelectedModel } from './selected-model.ts';

/**
 * The agent's offline scripted model, for when no API key is configured, labelled so nobody mistakes it
 * for Claude; without one, what to set. Apart from select-model.ts so that the CLI, which has no key in
 * the common local case, decides this without loading the Anthropic SDK.
 */
export function offlineSelection(agent: AgentDefinition): SelectedModel {
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
