// Why a listener cannot open, as a start-up problem naming the setting to change.
import type { ListenerAddress } from "../frontends/listener.js";

export function listenProblem(listener: ListenerAddress, error: NodeJS.ErrnoException): string {
  const { port, host, settings } = listener;
  const setting = settings.port;
  switch (error.code) {
    case "EADDRINUSE":
      return `${setting}: ${port} is in use on ${host} (another process listens there: stop it, or set ${setting} to a free port)`;
    case "EACCES":
      return `${setting}: ${port} needs privileges this process lacks (ports below 1024): choose a port from 1024 up`;
    case "EADDRNOTAVAIL":
      return `${settings.host}: ${host} is not an address of this machine`;
    default:
      return `${setting}: cannot listen on ${host}:${port} (${error.code ?? error.message})`;
  }
}
