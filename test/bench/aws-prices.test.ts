import { describe, expect, it } from 'vitest';
import { PRICES, computePer1000StepSeconds, describePrice, durableCost, stepFunctionsCost, stepwiseCost, total } from '../../bench/aws-prices.ts';

describe('the cost per 1,000 steps (bench/aws-prices.ts)', () => {
  it("prices a read-only step's counts item by item", () => {
    // 8 write units, 1 read unit, send + receive + delete, one invocation, 1.5 KB of logs (README, "What it costs").
    const lines = stepwiseCost({ writeUnits: 8, readUnits: 1, sqsRequests: 3, lambdaRequests: 1, logBytes: 1536, s3Puts: 0 });
    expect(Object.fromEntries(lines.map((l) => [l.item, Number(l.usdPer1000.toFixed(5))]))).toEqual({
      'DynamoDB write units': 0.005, 'DynamoDB read units': 0.00013, 'SQS FIFO requests': 0.0015,
      'Lambda requests': 0.0002, 'log bytes': 0.00072, 'S3 puts': 0,
    });
    expect(total(lines)).toBeCloseTo(0.0075, 4);
  });

  it('prices an S3 put at $0.005 per 1,000', () => {
    const lines = stepwiseCost({ writeUnits: 0, readUnits: 0, sqsRequests: 0, lambdaRequests: 0, logBytes: 0, s3Puts: 1 });
    expect(total(lines)).toBeCloseTo(0.005, 6);
  });

  it('prices Step Functions at three transitions and two Lambda requests per step, and its model can be changed', () => {
    expect(total(stepFunctionsCost())).toBeCloseTo(0.075 + 0.0004, 6);
    expect(total(stepFunctionsCost({ transitionsPerStep: 2, lambdaRequestsPerStep: 1 }))).toBeCloseTo(0.05 + 0.0002, 6);
  });

  it('prices durable functions by operations and by the bytes each step checkpoints', () => {
    const none = total(durableCost(0));
    expect(none).toBeCloseTo(0.016, 6);
    // A GiB per 1,000 steps is $0.25 more.
    expect(total(durableCost(2 ** 30 / 1000)) - none).toBeCloseTo(0.25, 6);
  });

  it("prices the worker's time at 256 MB as $0.0033 per 1,000 steps per second", () => {
    expect(computePer1000StepSeconds(256)).toBeCloseTo(0.00333, 5);
    expect(computePer1000StepSeconds(128)).toBeCloseTo(computePer1000StepSeconds(256) / 2, 9);
  });

  it('states each price as the price pages do', () => {
    expect(describePrice(PRICES.dynamoWriteUnit)).toBe('$0.625 per million DynamoDB write units (on demand)');
    expect(describePrice(PRICES.s3Put)).toBe('$0.005 per 1,000 S3 PUTs (standard)');
    expect(describePrice(PRICES.logsGb)).toBe('$0.5 per GB of CloudWatch logs ingested');
  });
});
