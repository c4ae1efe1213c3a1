import type { Model } from '../ports.ts';

/** The model a worker or the CLI runs with, and how it says so. */
export interface SelectedModel {
  model: Model;
  kind: 'anthropic' | 'offline';
  /** One line for people: which model runs and why (printed by the CLI, logged by workers). */
  label: string;
}
