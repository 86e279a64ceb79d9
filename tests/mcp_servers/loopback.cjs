// Loaded with `node --require` by the tests: every server the program starts listens
// on 127.0.0.1 (never on all interfaces) at a port the system picks, and the port is
// printed as `PORT <n>` on stdout, so no free port is guessed and raced for.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  this.once("listening", () => process.stdout.write(`PORT ${this.address().port}\n`));
  const callback = args.find((arg) => typeof arg === "function");
  return callback ? listen.call(this, 0, "127.0.0.1", callback) : listen.call(this, 0, "127.0.0.1");
};
