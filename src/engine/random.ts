/** Seeds for the VM's `Math.random`: four 32-bit words of its PRNG state. */
import { fillRandom } from "../platform/platform.ts";

const randomPool = new Uint32Array(4096);
let randomIndex = randomPool.length;

/** Four random words, from a pool refilled by the OS generator every 1,024 calls. */
export function randomWords(): number[] {
  if (randomIndex + 4 > randomPool.length) {
    fillRandom(randomPool);
    randomIndex = 0;
  }
  const i = randomIndex;
  randomIndex += 4;
  return [
    randomPool[i] as number,
    randomPool[i + 1] as number,
    randomPool[i + 2] as number,
    randomPool[i + 3] as number,
  ];
}

/** Four PRNG state words from a 32-bit seed (splitmix32), so that nearby seeds give unrelated sequences. */
export function seedWords(seed: number): number[] {
  let state = seed >>> 0;
  const words: number[] = [];
  for (let i = 0; i < 4; i++) {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    words.push((z ^ (z >>> 16)) >>> 0);
  }
  return words;
}
