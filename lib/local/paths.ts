/** The SQLite file of the embedded runtime, relative to the working directory (STEPWISE_DB or --db move it). */
export const DEFAULT_DB_PATH = '.stepwise/stepwise.db';
