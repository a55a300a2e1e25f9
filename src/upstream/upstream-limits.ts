/** Caps on what clients and programs may ask of `search` and `describe`. */

/** Default and largest number of `search` results. */
export const DEFAULT_SEARCH_LIMIT = 10;
export const MAX_SEARCH_LIMIT = 50;
/** Most tools one `describe` call declares. */
export const MAX_DESCRIBE_NAMES = 50;
/**
 * Longest `search` query and `describe` name, in characters. Both are matched against every tool: without a cap, one
 * call could hold the event loop, and every other session, for seconds.
 */
export const MAX_SEARCH_QUERY_CHARS = 1000;
export const MAX_TOOL_NAME_CHARS = 500;
/** Longest resource URI a program may pass to `resources.read`. */
export const MAX_RESOURCE_URI_CHARS = 8192;
/**
 * Largest JSON of one call's arguments the gateway sends to a stdio server, in UTF-8 bytes. A server built on the
 * official MCP SDK closes its stdio connection when one message passes 10 MiB (its `STDIO_DEFAULT_MAX_BUFFER_SIZE`),
 * which would fail every other execution's calls to that server and restart it: a larger call fails alone, in the
 * program, before it is sent. The 2 MiB to spare are for the request around the arguments and the read chunks.
 */
export const MAX_STDIO_CALL_ARGUMENT_BYTES = 8 * 1024 * 1024;
/**
 * Largest message the gateway reads from an upstream server, in bytes: over stdio the SDK's buffer (its default,
 * `STDIO_DEFAULT_MAX_BUFFER_SIZE`), past which it closes the connection, which is started again on the next call;
 * over HTTP one event of an event stream, or a whole JSON body, past which that response is cut off and its call
 * fails (the connection stays).
 */
export const MAX_UPSTREAM_MESSAGE_BYTES = 10 * 1024 * 1024;
/**
 * Bytes of messages under way on one HTTP connection to an upstream server, all its responses together (a message
 * is under way from its first byte to its end); past it, the response whose bytes came last is cut off. Over stdio,
 * messages come one after the other on one pipe.
 */
export const MAX_UPSTREAM_ANSWER_BYTES_IN_FLIGHT = 4 * MAX_UPSTREAM_MESSAGE_BYTES;
/**
 * Most tools one upstream server may list (all pages): past it the server is down, as one that failed to list, since
 * every tool is declared, searched and described by the gateway (10,000 register in seconds).
 */
export const MAX_UPSTREAM_TOOLS = 10_000;
/** Most resources, resource templates or prompts one upstream server may list: past it that list fails. */
export const MAX_UPSTREAM_LIST_ITEMS = 10_000;
/** Most characters of JSON one list of one upstream server may take, all pages together. */
export const MAX_UPSTREAM_LIST_BYTES = 16 * 1024 * 1024;
/**
 * Answers to one upstream server's own requests (ping, roots/list) sent and not yet taken: past it the server is
 * disconnected (its calls fail saying why; it is started again on the next call), since one that floods requests and
 * reads none of the answers would make the gateway hold them all.
 */
export const MAX_UPSTREAM_OWED_ANSWERS = 256;
