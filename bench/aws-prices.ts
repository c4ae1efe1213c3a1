/**
 * The public list prices the cost figures use (us-east-1, arm64, as known in 2025: the table of the README's
 * "What it costs"), and what a step's measured counts cost per 1,000 steps on stepwise, on Step Functions
 * standard workflows and on Lambda durable functions. Written down on a machine without network access and
 * NOT re-checked online: check them against the AWS price pages before relying on them. Not a benchmark
 * itself (bench/run-all.ts skips it); bench/aws-step-costs.ts prints its figures.
 */

/** A list price: `usd` for `quantity` of `unit` (as the price pages state it: $0.625 per million write units). */
export interface Price { usd: number; quantity: number; unit: string; source: string }

const LIST = 'AWS price page, us-east-1, as known in 2025; not re-checked online';
const RECALLED = 'recalled, not verified (launched late 2025); not re-checked online';
/**
 * The durable operation's price as the AWS Lambda price page's worked example gave it when a public
 * transcription of that page (api-evangelist/aws-lambda, plans/aws-lambda-plans-pricing.yml, read
 * 2026-09-20) quoted it; found in a stored copy of that file, not on the page itself.
 */
const TRANSCRIBED = 'as quoted from the AWS price page (its worked example) in a public transcription read 2026-09-20; not re-checked online';
const MILLION = 1e6;

export const PRICES = {
  dynamoWriteUnit: { usd: 0.625, quantity: MILLION, unit: 'DynamoDB write units (on demand)', source: LIST },
  dynamoReadUnit: { usd: 0.125, quantity: MILLION, unit: 'DynamoDB read units (on demand)', source: LIST },
  sqsFifoRequest: { usd: 0.5, quantity: MILLION, unit: 'SQS FIFO requests (64 KB chunks)', source: LIST },
  lambdaRequest: { usd: 0.2, quantity: MILLION, unit: 'Lambda requests', source: LIST },
  lambdaGbSecond: { usd: 0.0000133334, quantity: 1, unit: 'Lambda GB-second (arm64)', source: LIST },
  logsGb: { usd: 0.5, quantity: 1, unit: 'GB of CloudWatch logs ingested', source: LIST },
  s3Put: { usd: 0.005, quantity: 1000, unit: 'S3 PUTs (standard)', source: LIST },
  stepFunctionsTransition: { usd: 0.025, quantity: 1000, unit: 'Step Functions standard state transitions', source: LIST },
  durableOperation: { usd: 8, quantity: MILLION, unit: 'Lambda durable operations', source: TRANSCRIBED },
  durableWrittenGb: { usd: 0.25, quantity: 1, unit: 'GB written by durable operations', source: RECALLED },
} satisfies Record<string, Price>;

/** "$0.625 per million DynamoDB write units", for the bench's list of the prices it used. */
export const describePrice = (p: Price): string =>
  `$${p.usd} per ${p.quantity === MILLION ? 'million' : p.quantity === 1 ? '' : p.quantity.toLocaleString('en-US')} ${p.unit}`.replace('per  ', 'per ');

const GB = 2 ** 30;

/** One line of a bill: what, how many per step, dollars per 1,000 steps. */
export interface CostLine { item: string; perStep: number; usdPer1000: number }

const line = (item: string, perStep: number, price: Price, unit = 1): CostLine => ({ item, perStep, usdPer1000: (1000 * perStep * price.usd) / price.quantity / unit });

export const total = (lines: readonly CostLine[]): number => lines.reduce((n, l) => n + l.usdPer1000, 0);

/** What one stepwise step was measured to use (per step, averaged over the steps of one kind). */
export interface StepCounts {
  writeUnits: number;
  readUnits: number;
  /** The handler's sends, the event source's receives and deletes. */
  sqsRequests: number;
  lambdaRequests: number;
  logBytes: number;
  s3Puts: number;
}

export function stepwiseCost(c: StepCounts): CostLine[] {
  return [
    line('DynamoDB write units', c.writeUnits, PRICES.dynamoWriteUnit),
    line('DynamoDB read units', c.readUnits, PRICES.dynamoReadUnit),
    line('SQS FIFO requests', c.sqsRequests, PRICES.sqsFifoRequest),
    line('Lambda requests', c.lambdaRequests, PRICES.lambdaRequest),
    line('log bytes', c.logBytes, PRICES.logsGb, GB),
    line('S3 puts', c.s3Puts, PRICES.s3Put),
  ];
}

/**
 * The model assumed for Step Functions standard: the agent loop as a state machine of a model task (a
 * Lambda calling the model), a tool task (a Lambda running the tool) and a choice (DONE or loop), so three
 * state transitions and two Lambda requests per step; the state rides in the execution's payload (free up
 * to 256 KB), the history is not billed.
 */
export const STEP_FUNCTIONS_MODEL = { transitionsPerStep: 3, lambdaRequestsPerStep: 2 };

export function stepFunctionsCost(model = STEP_FUNCTIONS_MODEL): CostLine[] {
  return [
    line('state transitions', model.transitionsPerStep, PRICES.stepFunctionsTransition),
    line('Lambda requests', model.lambdaRequestsPerStep, PRICES.lambdaRequest),
  ];
}

/**
 * The model assumed for Lambda durable functions: the loop inside one durable function, each step two
 * durable operations (the model call and the tool call, each `context.step`, each checkpointing its result),
 * the function invoked once per run and again only to resume (no Lambda request per step); the bytes written
 * are what the step checkpoints, the measured size of stepwise's record of the same step (with a large
 * output counted in full, since a durable operation checkpoints its result itself).
 */
export const DURABLE_MODEL = { operationsPerStep: 2 };

export function durableCost(checkpointBytesPerStep: number, model = DURABLE_MODEL): CostLine[] {
  return [
    line('durable operations', model.operationsPerStep, PRICES.durableOperation),
    line('bytes checkpointed', checkpointBytesPerStep, PRICES.durableWrittenGb, GB),
  ];
}

/** The worker's time, the same on all three while a Lambda awaits the model: per second a step takes. */
export function computePer1000StepSeconds(memoryMb: number): number {
  return (1000 * (memoryMb / 1024) * PRICES.lambdaGbSecond.usd) / PRICES.lambdaGbSecond.quantity;
}
