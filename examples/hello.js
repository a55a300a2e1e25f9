// A sandbox script is the body of an async function: it awaits tools, prints, and returns a value.
//   npx airlock run examples/hello.js --tools examples/tools.mjs
const cities = ["Lisbon", "Oslo", "Nairobi"];
let total = 0;
for (const city of cities) {
  const { tempC, conditions } = await tools.weather({ city });
  text(`${city}: ${tempC} °C, ${conditions}`);
  total = await tools.add({ a: total, b: tempC });
}
const note = await tools.read_file({ path: "note.txt" });
console.log(`note.txt says: ${note.trim()}`);
return { cities: cities.length, averageC: total / cities.length };
