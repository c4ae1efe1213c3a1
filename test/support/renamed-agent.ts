/** The process tests' agent after a rename, without saying so: its worker must not take the old runs. */
import { defineAgent } from '../../lib/agent.ts';
import processAgent from './process-agent.ts';

export default defineAgent({ ...processAgent, name: 'process-rows-v2' });
