import { describe, expect, it } from 'vitest';
import { vitestArgs } from '../../scripts/fuzz.ts';

describe('npm run fuzz', () => {
  it('runs the whole fuzz folder when no file is named', () => {
    expect(vitestArgs([])).toEqual(['run', 'test/fuzz']);
    expect(vitestArgs(['-t', 'approval'])).toEqual(['run', 'test/fuzz', '-t', 'approval']);
  });

  it('runs only the files named, by path or by name, where the folder in front of them ran every file', () => {
    expect(vitestArgs(['tool-output'])).toEqual(['run', 'test/fuzz/tool-output.test.ts']);
    expect(vitestArgs(['test/fuzz/http.test.ts', 'engine', '-t', 'any body'])).toEqual(['run', 'test/fuzz/http.test.ts', 'test/fuzz/engine.test.ts', '-t', 'any body']);
  });

  it('passes on what names no fuzz file, for vitest to take or refuse', () => {
    expect(vitestArgs(['-t', 'engine'])).toEqual(['run', 'test/fuzz', '-t', 'engine']);
    expect(vitestArgs(['no-such-file', '--reporter=dot'])).toEqual(['run', 'test/fuzz', 'no-such-file', '--reporter=dot']);
  });
});
