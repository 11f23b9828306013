// Provider tokens and API keys on the embedded memory store: the same contract as Redis.
import { createMemoryStore } from "../../src/store/store.js";
import { describeExternalIdentityContract } from "../contract/external-identity-contract.js";

describeExternalIdentityContract("memory", () => createMemoryStore());
