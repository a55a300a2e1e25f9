// Counts its runs in a store file: load() reads it, store() changes are saved after a successful run.
//   npx airlock run examples/counter.js --store counter.json
const count = (load("count") ?? 0) + 1;
store("count", count);
text(`This script has run ${count} time${count === 1 ? "" : "s"}.`);
return count;
