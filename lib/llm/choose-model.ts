import type { AgentDefinition } from '../agent.ts';
import { apiKeyFromEnv } from './api-key.ts';
import { offlineSelection } from './offline-model.ts';
import type { SelectedModel } from './selected-model.ts';

/**
 * The model for a run: Claude with an API key, else the agent's offline model, labelled as such. The
 * Anthropic SDK (behind select-model.ts) is imported only when there is a key.
 */
export async function chooseModel(agent: AgentDefinition): Promise<SelectedModel> {
  if (!apiKeyFromEnv()) return offlineSelection(agent);
  return (await import('./select-model.ts')).selectModel(agent);
}
