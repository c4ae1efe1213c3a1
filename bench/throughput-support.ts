/**
 * The agent that bench/throughput.ts's worker processes load (`stepwise worker --agent <this file>`): the
 * benchmark agent of aws-support.ts, with its instant model as the offline model, so the processes run
 * the same steps as the AWS containers. THROUGHPUT_STEPS sets the steps per run, THROUGHPUT_MODEL_MS how long
 * the model takes to decide (0: at once).
 */
import { benchAgent } from './aws-support.ts';

const { agent: definition, model } = benchAgent({ steps: Number(process.env.THROUGHPUT_STEPS ?? 20), modelMs: Number(process.env.THROUGHPUT_MODEL_MS ?? 0) });

export const agent = { ...definition, offlineModel: model };
