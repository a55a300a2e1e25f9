// biome-ignore-all format: kept as dense as the first example of docs/governed-programs.md, which it matches.
/**
 * Governed code mode: a program adds up catalog prices through a typed tool, under a broker with permissions and a
 * budget. Run it with `node examples/catalog-total.mjs` (in a clone, after `npm install`).
 */

import { Budget, defineTool, invokeTool } from 'airlock-codemode';
import { createQuickJsSandboxAdapter } from 'airlock-codemode/adapter-code-quickjs';
import { CODE_PROGRAM_LIMITS, createCodeMode, defineCodeProgram } from 'airlock-codemode/code-mode';
import { z } from 'zod';

const price = defineTool({
  id: 'catalog.price', version: '1', description: 'Price of one product in cents.',
  input: z.object({ sku: z.string() }), output: z.object({ cents: z.number().int() }),
  effects: 'read', capabilities: [], costMicros: 0,
  execute: async ({ sku }) => ({ cents: sku.length * 100 }),
});
const program = defineCodeProgram({
  id: 'catalog.total', version: '1', intent: 'Add up the prices of several products.', language: 'javascript',
  source: `async (input, tools) => {
    let total = 0;
    for (const sku of input.skus) {
      const result = await tools.call('catalog.price', { sku });
      if (result.status !== 'succeeded') throw new Error('price lookup failed');
      total += result.output.cents;
    }
    return { totalCents: total };
  }`,
  input: z.object({ skus: z.array(z.string()).max(20) }), output: z.object({ totalCents: z.number().int() }),
  inputSchemaId: 'catalog.skus.v1', outputSchemaId: 'catalog.total.v1', tools: [price],
  limits: { ...CODE_PROGRAM_LIMITS, maxToolCalls: 20 },
});
const budget = new Budget(0, 20);
const mode = createCodeMode({
  adapter: createQuickJsSandboxAdapter(),
  invokeTool: (tool, input, context) => invokeTool(tool, input, {
    runId: context.runId, callId: context.callId, scope: context.scope, signal: context.signal,
    permissions: { allow: [`tool:${tool.id}`, 'effect:read'] }, budget,
  }),
});
const outcome = await mode.execute(program, { skus: ['ab', 'cde'] }, {
  runId: 'run-1', executionId: 'run-1:total', scope: { principalId: 'local', projectId: 'demo' },
  signal: AbortSignal.timeout(10_000),
});
// outcome.status === 'succeeded', outcome.output => { totalCents: 500 }, outcome.usage => tool calls made, costs
console.log(outcome.status, outcome.status === 'succeeded' ? outcome.output : outcome.error.code, outcome.usage);
// The adapter owns a pool of worker threads; close it when done.
await mode.adapter.close();
