import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { SECRET, webhookEnv } from '../support/webhooks.js';

// The WEBHOOK_* settings (docs/admin-api.md).

describe('webhook settings', () => {
  it('WEBHOOK_URL needs WEBHOOK_SECRET of 32 characters or more, which no error repeats; thresholds are ascending percentages', () => {
    expect(loadConfig({}).webhooks).toBeUndefined();
    expect(loadConfig(webhookEnv('https://hooks.example.test/x')).webhooks).toEqual({
      url: 'https://hooks.example.test/x',
      authorization: undefined,
      secret: SECRET,
      usageThresholds: [100],
      creditsLowThresholds: [20],
    });
    expect(loadConfig({ WEBHOOK_URL: 'https://h.example.test', WEBHOOK_SECRET: SECRET }).webhooks?.usageThresholds).toEqual([80, 100]);
    expect(() => loadConfig(webhookEnv('https://h.example.test', { WEBHOOK_RETENTION_DAYS: '0' }))).toThrow('WEBHOOK_RETENTION_DAYS');
    expect(() => loadConfig({ WEBHOOK_URL: 'https://hooks.example.test/x' })).toThrow('WEBHOOK_URL and WEBHOOK_SECRET go together');
    expect(() => loadConfig({ WEBHOOK_SECRET: SECRET })).toThrow('WEBHOOK_URL and WEBHOOK_SECRET go together');
    const short = 'too-short-a-secret';
    expect(() => loadConfig({ WEBHOOK_URL: 'https://h.example.test', WEBHOOK_SECRET: short })).toThrow('Invalid WEBHOOK_SECRET=***');
    expect(() => loadConfig({ WEBHOOK_URL: 'https://h.example.test', WEBHOOK_SECRET: short })).not.toThrow(short);
    expect(() => loadConfig({ WEBHOOK_URL: 'ftp://h.example.test', WEBHOOK_SECRET: SECRET })).toThrow('WEBHOOK_URL');
    expect(() => loadConfig({ WEBHOOK_URL: 'https://h[ooks.example.test', WEBHOOK_SECRET: SECRET })).toThrow(
      'Invalid WEBHOOK_URL="https://h[ooks.example.test": not a URL',
    );
    // A user and password become Basic authentication, %-escapes decoded, and leave the URL.
    expect(loadConfig(webhookEnv('https://hooks:s3c%40ret@hooks.example.test/x?a=1')).webhooks).toMatchObject({
      url: 'https://hooks.example.test/x?a=1',
      authorization: `Basic ${Buffer.from('hooks:s3c@ret').toString('base64')}`,
    });
    expect(loadConfig(webhookEnv('https://:s3cret@hooks.example.test/')).webhooks?.authorization).toBe(
      `Basic ${Buffer.from(':s3cret').toString('base64')}`,
    );
    expect(() => loadConfig(webhookEnv('https://hooks:s3c%ret@hooks.example.test/x'))).toThrow(
      'Invalid WEBHOOK_URL="https://hooks:***@hooks.example.test/x": its user or password holds a % that starts no %-escape',
    );
    for (const thresholds of ['100,80', '0,50', '80,80', '101', '80;100']) {
      expect(() =>
        loadConfig({ WEBHOOK_URL: 'https://h.example.test', WEBHOOK_SECRET: SECRET, WEBHOOK_USAGE_THRESHOLDS: thresholds }),
      ).toThrow('WEBHOOK_USAGE_THRESHOLDS');
    }
  });

  it('CREDITS_LOW_THRESHOLDS: percentages of a balance, 1 to 100, ascending; refused at start otherwise, naming the setting and its value', () => {
    expect(loadConfig(webhookEnv('https://h.example.test', { CREDITS_LOW_THRESHOLDS: '10,25,50' })).webhooks?.creditsLowThresholds).toEqual(
      [10, 25, 50],
    );
    expect(loadConfig(webhookEnv('https://h.example.test', { CREDITS_LOW_THRESHOLDS: '100' })).webhooks?.creditsLowThresholds).toEqual([
      100,
    ]);
    for (const thresholds of ['50,20', '0', '101', '20,20']) {
      expect(() => loadConfig(webhookEnv('https://h.example.test', { CREDITS_LOW_THRESHOLDS: thresholds }))).toThrow(
        `Invalid CREDITS_LOW_THRESHOLDS="${thresholds}": percentages from 1 to 100, ascending, each once`,
      );
    }
    // Checked without WEBHOOK_URL too, as a mistake there would surface only once the webhooks are set.
    expect(() => loadConfig({ CREDITS_LOW_THRESHOLDS: '101' })).toThrow('Invalid CREDITS_LOW_THRESHOLDS="101"');
    expect(() => loadConfig({ CREDITS_LOW_THRESHOLDS: '20;50' })).toThrow('CREDITS_LOW_THRESHOLDS');
  });
});
