/**
 * A shop's two tools for the approval tests: `lookup`, a read that gives an order's total (500 cents), and `refund`, a
 * write that needs a person's approval. Each notes what it was called with, so that a test counts what was sent.
 */
import { defineTool, type Tool, z } from "airlock-codemode";

export interface Refund {
  order: string;
  cents: number;
}

export function refundTools() {
  /** `order:cents` of every refund sent, in order. */
  const sent: string[] = [];
  /** The order of every lookup, in order. */
  const lookups: string[] = [];
  const lookup = defineTool({
    id: "lookup",
    version: "1",
    description: "Reads an order.",
    input: z.object({ order: z.string(), t: z.number().optional() }),
    output: z.object({ order: z.string(), cents: z.number() }),
    effects: "read",
    capabilities: [],
    costMicros: 1,
    execute: ({ order }: { order: string }) => {
      lookups.push(order);
      return { order, cents: 500 };
    },
  }) as Tool;
  const refund = defineTool({
    id: "refund",
    version: "1",
    description: "Sends money back.",
    input: z.object({ order: z.string(), cents: z.number() }),
    output: z.object({ refunded: z.string() }),
    effects: "write",
    capabilities: [],
    costMicros: 5,
    approval: "always",
    execute: ({ order, cents }: Refund) => {
      sent.push(`${order}:${cents}`);
      return { refunded: `${order}:${cents}` };
    },
  }) as Tool;
  return { sent, lookups, tools: [lookup, refund] };
}
