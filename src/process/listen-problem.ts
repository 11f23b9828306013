// Why a listener cannot open, as a start-up problem naming the setting to change.

const PORT_SETTINGS = { public: "PORT", check: "CHECK_PORT", admin: "ADMIN_PORT" } as const;
const HOST_SETTINGS = { public: "HOST", check: "CHECK_HOST", admin: "ADMIN_HOST" } as const;

export function listenProblem(options: {
  name: keyof typeof PORT_SETTINGS;
  port: number;
  host: string;
  error: NodeJS.ErrnoException;
}): string {
  const { port, host, error } = options;
  const setting = PORT_SETTINGS[options.name];
  switch (error.code) {
    case "EADDRINUSE":
      return `${setting}: ${port} is in use on ${host} (another process listens there: stop it, or set ${setting} to a free port)`;
    case "EACCES":
      return `${setting}: ${port} needs privileges this process lacks (ports below 1024): choose a port from 1024 up`;
    case "EADDRNOTAVAIL":
      return `${HOST_SETTINGS[options.name]}: ${host} is not an address of this machine`;
    default:
      return `${setting}: cannot listen on ${host}:${port} (${error.code ?? error.message})`;
  }
}
