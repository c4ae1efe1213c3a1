import { defaultModelId } from '../llm/model-id.ts';
import type { HttpDeps } from './deps.ts';

/**
 * The model that prices usage no step records one for (a run's DONE or discarded replies before any step
 * named its model): the agent's, which its workers ask, else the deployment's default. The API, the
 * inspector's pages and its fork and retry all price by it, as the budget does.
 */
export function pricingModelFor(deps: Pick<HttpDeps, 'agent'>): string {
  return deps.agent.settings?.model ?? defaultModelId();
}
