import { driftAgent } from './build.ts';

export default driftAgent('changed-input');
