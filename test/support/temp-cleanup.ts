import { afterAll } from 'vitest';
import { removeTempDirs } from './temp-dirs.ts';

// Vitest setup file: runs in every test file, so each removes what its tests made.
afterAll(removeTempDirs);
