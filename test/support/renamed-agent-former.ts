/** The process tests' agent after a rename, declared: it takes over the runs of its former name. */
import { defineAgent } from '../../lib/agent.ts';
import processAgent from './process-agent.ts';

export default defineAgent({ ...processAgent, name: 'process-rows-v2', formerNames: ['process-rows'] });
