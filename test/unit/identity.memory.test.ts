// Identity on the embedded memory store: the same contract as Redis, over the real express apps.
import { createMemoryStore } from "../../src/store/store.js";
import { describeIdentityContract } from "../contract/identity-contract.js";

describeIdentityContract("memory", () => createMemoryStore());
